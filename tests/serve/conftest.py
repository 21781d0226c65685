"""A live `nexus serve` app on a loopback port, in this process (one model load for the module)."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest

API_KEY = "test-key"
BUDGET = 256  # tokens per layer: a few turns of chat already evict
CHUNK = 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, tokenizer, policy: str = "nexus", max_sessions: int = 3, budget: int = BUDGET,
                 api_key: str | None = API_KEY):
    import uvicorn

    from nexus.runtime import InferenceStream, make_policy
    from nexus.serve.app import create_app
    from nexus.serve.engine import Engine

    engine = Engine(model, tokenizer,
                    make_stream=lambda: InferenceStream(model, tokenizer, make_policy(policy), budget=budget,
                                                        chunk_size=CHUNK),
                    served_model="embedded", max_sessions=max_sessions, session_ttl=600, default_max_tokens=16)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine, api_key=api_key), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=15)

    return SimpleNamespace(base_url=f"http://127.0.0.1:{port}/v1", root=f"http://127.0.0.1:{port}",
                           engine=engine, api_key=api_key, stop=stop)


@pytest.fixture(scope="module")
def server(embedded):
    srv = start_server(*embedded)
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=120)
