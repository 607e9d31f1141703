"""Error kinds are one typed list: each kind's HTTP status, retry, CLI exit code and
meaning come from it, and the docs' table is it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import CfsmError, ErrorKind, kinds_table
from engine.openai.errors import from_engine

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_table_is_the_list():
    assert kinds_table() in (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")


def test_a_kind_not_in_the_list_is_refused():
    with pytest.raises(ValueError, match="unknown error kind"):
        CfsmError("bussy", "typo")


@pytest.mark.parametrize(
    "kind, status, retry_after",
    [("busy", 429, "1"), ("model_loading", 503, "5"), ("exceeds_capacity", 400, None),
     ("invalid_regex", 400, None), ("unknown_model", 404, None), ("internal", 500, None)],
)  # fmt: skip
def test_api_status_and_retry_come_from_the_kind(kind, status, retry_after):
    err = from_engine(CfsmError(kind, "x"))
    assert err.status == status and err.code == kind
    assert err.headers().get("Retry-After") == retry_after
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}


def test_retryable_kinds_and_only_they_are_answered_with_a_retry_status():
    for k in ErrorKind:
        assert k.spec.retryable == (k.spec.status in (408, 409, 429, 503)), k


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cfsm", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)  # fmt: skip


def test_replay_of_a_missing_or_bad_response_file_is_invalid_input(tmp_path):
    missing = _cli("replay", "--regex", "(yes|no)", "--response", str(tmp_path / "none.json"))
    assert missing.returncode == 2, missing.stderr
    err = json.loads(missing.stdout)["error"]
    assert err["kind"] == "invalid_input" and "none.json" in err["message"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    out = _cli("replay", "--regex", "(yes|no)", "--response", str(bad))
    assert out.returncode == 2 and json.loads(out.stdout)["error"]["kind"] == "invalid_input"
