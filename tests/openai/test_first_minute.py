"""The first minute of `cfsm serve` as a client meets it: a request sent 0.1 s after the
command starts gets its completion with the `openai` client's default settings (3 tries),
where it used to get 503s and a 404 (the /v1 routes were added after the port opened) and
raise. The server binds its port before it imports the page, and a request waits for the
model (docs/api.md, "The first minute")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import openai
import pytest

pytestmark = pytest.mark.model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_request_sent_as_the_server_starts_gets_its_completion(tmp_path):
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "cfsm", "serve", "--port", str(port)]
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        time.sleep(0.1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        r = client.chat.completions.create(
            model="embedded",
            messages=[{"role": "user", "content": "Yes or no?"}],
            extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
            temperature=0,
        )
        assert r.choices[0].message.content in ("yes", "no")
        assert client.models.list().data[0].id == "embedded"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
