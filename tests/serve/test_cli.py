"""`nexus serve` as a user runs it: bad flags refused in one sentence before the model loads; a real start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.serve.conftest import free_port

NEXUS = [sys.executable, "-m", "nexus.cli", "serve"]


@pytest.mark.parametrize("args, words", [
    (["--host", "0.0.0.0"], "--api-key"),
    (["--policy", "bogus"], "bogus"),
    (["--port", "70000"], "not a TCP port"),
    (["--max-sessions", "0"], "--max-sessions"),
    (["--model", "/nonexistent"], "not a model directory"),
])
def test_bad_flags_are_one_sentence_and_exit_2(args, words):
    t0 = time.monotonic()
    r = subprocess.run([*NEXUS, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], r.stderr
    assert "loading" not in r.stderr and time.monotonic() - t0 < 60


@pytest.mark.slow
def test_serve_starts_answers_and_stops_on_ctrl_c():
    port = free_port()
    proc = subprocess.Popen([*NEXUS, "--port", str(port), "--budget", "256", "--chunk-size", "64"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.5)
        assert health["status"] == "ok" and health["budget_tokens"] == 256 and health["sessions"] == 0
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120, json={
            "model": "embedded", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        busy = subprocess.run([*NEXUS, "--port", str(port)], capture_output=True, text=True, timeout=120)
        assert busy.returncode == 2 and "Cannot listen" in busy.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode in (0, 130), err
