"""Shared fixtures: the embedded model (loaded once per session) and tiny random-weight models."""

from __future__ import annotations

import os

# Triton decorates its kernels (and triton.language's own @jit helpers) when it is imported, and some collected
# modules import it indirectly, so the interpreter flag must be set here, before any collection. On a GPU machine,
# run with TRITON_INTERPRET=0 to test the compiled kernels.
os.environ.setdefault("TRITON_INTERPRET", "1")

import signal  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch

# Tests that press Ctrl-C on a child process need SIGINT to reach it as KeyboardInterrupt. A suite started as a
# background job (`make test &`, nohup) inherits SIGINT ignored, and every child it spawns would inherit that too.
signal.signal(signal.SIGINT, signal.default_int_handler)


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` with a throwaway identity; its stdout, stripped."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


# CI promises a docker engine and bubblewrap (.ci/run starts them): there a missing engine must fail the tests
# that need it, not skip them. Elsewhere (a laptop without docker) those tests skip with the reason.
REQUIRE_ENGINES = os.environ.get("NEXUS_REQUIRE_ENGINES") == "1"


def local_kind() -> str:
    """The sandbox kind for tests of the agent and the harness (not of isolation): "local" where bubblewrap runs,
    else "local-unsafe", which `local` would refuse to fall back to (tests/sandbox/test_limits.py checks that)."""
    from nexus.sandbox.local_sandbox import bwrap_usable

    return "local" if bwrap_usable() else "local-unsafe"


LOCAL = local_kind()


def missing_engine(reason: str) -> None:
    if REQUIRE_ENGINES:
        pytest.fail(f"{reason}; NEXUS_REQUIRE_ENGINES=1 says this machine must have it")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    from nexus.sandbox.engine import engine_available

    if not engine_available():
        missing_engine("no docker engine answers (run scripts/docker-engine as root to start one)")


@pytest.fixture(scope="session")
def docker_ready(docker_engine) -> str:
    """The base image name once a docker engine answers (built once via debootstrap, then reused)."""
    from nexus.sandbox.images import ensure_base_image

    return ensure_base_image()


@pytest.fixture(scope="session")
def embedded():
    """(model, tokenizer) of the embedded SmolLM2-135M-Instruct, fp32 on CPU."""
    from nexus.runtime import load_model

    return load_model("embedded", device="cpu")


@pytest.fixture(scope="session")
def tokenizer():
    """The embedded model's tokenizer, without loading its weights."""
    from transformers import AutoTokenizer

    from nexus.runtime.model_loading import embedded_model_dir

    return AutoTokenizer.from_pretrained(embedded_model_dir())


def tiny_model(kind: str, vocab_size: int, seed: int = 0, layers: int = 3, **config):
    """A random-weight model of the given family, small enough for exactness tests to run in seconds; `config`
    overrides the configuration (e.g. initializer_range)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                  eos_token_id=2, bos_token_id=1, tie_word_embeddings=True, **config)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif kind == "qwen2":
        # Qwen2 carries q/k/v biases: checks that nothing assumes bias-free projections.
        model = Qwen2ForCausalLM(Qwen2Config(**common, use_sliding_window=False))
    else:
        raise ValueError(kind)
    return model.eval()


@pytest.fixture(params=["llama", "qwen2"])
def tiny(request, tokenizer):
    return tiny_model(request.param, len(tokenizer)), tokenizer


@pytest.fixture
def tiny_llama(tokenizer):
    """One family is enough where the behaviour under test does not depend on the architecture."""
    return tiny_model("llama", len(tokenizer)), tokenizer
