"""A live `nexus serve` app on a loopback port, in this process (one model load for the module)."""

from __future__ import annotations

import pytest

from nexus.serve.background import free_port  # noqa: F401  (the CLI test binds its own port)

API_KEY = "test-key"
BUDGET = 256  # tokens per layer: a few turns of chat already evict
CHUNK = 64


def start_server(model, tokenizer, policy: str = "nexus", max_sessions: int = 3, budget: int = BUDGET,
                 api_key: str | None = API_KEY):
    from nexus.runtime import InferenceStream, make_policy
    from nexus.serve.background import BackgroundServer
    from nexus.serve.engine import Engine

    engine = Engine(model, tokenizer,
                    make_stream=lambda: InferenceStream(model, tokenizer, make_policy(policy), budget=budget,
                                                        chunk_size=CHUNK),
                    served_model="embedded", max_sessions=max_sessions, session_ttl=600, default_max_tokens=16)
    return BackgroundServer(engine, api_key=api_key).start()


@pytest.fixture(scope="module")
def server(embedded):
    srv = start_server(*embedded)
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=120)
