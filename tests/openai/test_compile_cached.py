"""`cfsm.compile_cached` says whether this request's compile was in the cache when the
request came, not whether the decode found the compile the request itself had just made."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.model


def test_a_regex_never_sent_is_not_cached_and_the_same_one_again_is(app_url):
    word = uuid.uuid4().hex[:8]  # a regex no earlier request of the session sent
    body = {
        "model": "embedded",
        "messages": [{"role": "user", "content": "Say the word."}],
        "structured_outputs": {"regex": f"({word}|no)"},
        "max_tokens": 8,
        "temperature": 0,
    }
    first = httpx.post(f"{app_url}/v1/chat/completions", json=body, timeout=120).json()
    again = httpx.post(f"{app_url}/v1/chat/completions", json=body, timeout=120).json()
    assert first["cfsm"]["compile_cached"] is False, first["cfsm"]
    assert again["cfsm"]["compile_cached"] is True, again["cfsm"]
    assert first["choices"][0]["message"]["content"] in (word, "no")
