"""Bad input gets one clear sentence and changes nothing; seeds make randomness reproducible."""

from __future__ import annotations

import pytest

from nexus.errors import NexusError, UnsupportedModelError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.model_loading import check_supported
from tests.runtime.test_stream_exactness import random_ids


def test_budget_below_forced_plus_chunk(tiny_llama):
    model, tok = tiny_llama
    policy = make_policy("nexus_paper")  # uncapped: its 4 + 4 blocks of 32 are forced whatever the budget
    with pytest.raises(NexusError, match="forced tokens") as err:
        InferenceStream(model, tok, policy, budget=policy.min_budget() + 63, chunk_size=64)
    assert str(err.value).count(".") <= 2  # one sentence (numbers aside)
    InferenceStream(model, tok, policy, budget=policy.min_budget() + 64, chunk_size=64)


def test_budget_where_even_the_smallest_forced_set_breaks_the_cap(tiny_llama):
    model, tok = tiny_llama
    policy = make_policy("nexus", b=16)  # 1 sink block + the last 16 tokens + the partial block = 47 tokens <= 25%
    with pytest.raises(NexusError, match="too small.*at least 188 tokens") as err:
        InferenceStream(model, tok, policy, budget=187, chunk_size=16)
    assert str(err.value).count(". ") == 0  # one sentence
    InferenceStream(model, tok, policy, budget=188, chunk_size=16)


@pytest.mark.parametrize("budget", ["lots", "12 parsecs", 0, "-5"])
def test_bad_budget_strings(tiny_llama, budget):
    model, tok = tiny_llama
    with pytest.raises(NexusError, match="[Bb]udget"):
        InferenceStream(model, tok, make_policy("dense"), budget=budget)


def test_unknown_policy_lists_registry():
    with pytest.raises(NexusError, match="dense.*nexus.*streaming_llm"):
        make_policy("top_k_magic")


@pytest.mark.parametrize("params", [dict(lam=-1), dict(n=0), dict(n="sometimes"), dict(block_size=24),
                                    dict(recent_tokens=4), dict(forced_cap=0), dict(top_share=1.0),
                                    dict(walk_rows="middle"), dict(prefill_score="x")])
def test_nexus_parameters_out_of_range(params):
    with pytest.raises(NexusError):
        make_policy("nexus", **params)


def _configs():
    from transformers import Gemma2Config, JambaConfig, MambaConfig, MistralConfig, Qwen2Config, Qwen3NextConfig

    yield "sliding_window", Qwen2Config(use_sliding_window=True, sliding_window=128, num_hidden_layers=2,
                                        layer_types=["sliding_attention", "sliding_attention"])
    yield "sliding", Gemma2Config(num_hidden_layers=2)
    yield "sliding", MistralConfig(sliding_window=4096, num_hidden_layers=2)
    yield "recurrent", MambaConfig(num_hidden_layers=2)
    # hybrids: full-attention layers mixed with linear-attention / Mamba layers
    yield "linear_attention", Qwen3NextConfig(num_hidden_layers=4)
    yield "linear_attention", JambaConfig(num_hidden_layers=2)


@pytest.mark.parametrize("expect,config", list(_configs()), ids=lambda x: getattr(x, "model_type", x))
def test_unsupported_cache_types_are_named(expect, config):
    with pytest.raises(UnsupportedModelError) as err:
        check_supported(config)
    assert config.model_type in str(err.value) and expect.split("_")[0] in str(err.value)


def test_empty_append_is_a_noop(tiny_llama):
    model, tok = tiny_llama
    stream = InferenceStream(model, tok, make_policy("nexus"), budget=400, chunk_size=64)
    assert stream.append("") == 0 and stream.append([]) == 0
    assert stream.stats.tokens_seen == 0 and stream.last_logits is None
    with pytest.raises(NexusError, match="empty"):
        stream.generate(5)
    stream.append(random_ids(100, len(tok)))
    before = stream.stats.as_dict()
    stream.append("")
    assert stream.stats.as_dict() == before


def test_bad_sampling_arguments_change_nothing(tiny_llama):
    model, tok = tiny_llama
    stream = InferenceStream(model, tok, make_policy("dense"), budget=4096)
    stream.append(random_ids(50, len(tok)))
    before = stream.stats.as_dict()
    for kwargs in (dict(temperature=-1), dict(top_p=0), dict(top_p=1.5)):
        with pytest.raises(NexusError):
            stream.generate(5, **kwargs)
    with pytest.raises(NexusError, match="role"):
        stream.append_message("wizard", "hi")
    assert stream.stats.as_dict() == before


def test_seed_makes_sampling_and_selection_reproducible(tiny_llama):
    model, tok = tiny_llama
    ids = random_ids(900, len(tok), seed=9)

    def run(seed):
        stream = InferenceStream(model, tok, make_policy("nexus_reservoir", n=1), budget=400, chunk_size=64, seed=seed)
        stream.append(ids)
        out = stream.generate(12, temperature=1.0, top_p=0.9)
        return out.token_ids, [layer.positions.tolist() for layer in stream.cache.layers]

    tokens_a, kept_a = run(11)
    tokens_b, kept_b = run(11)
    tokens_c, kept_c = run(12)
    assert tokens_a == tokens_b and kept_a == kept_b
    assert kept_a != kept_c  # a different seed draws a different reservoir sample


def test_reservoir_is_random_but_det_is_not(tiny_llama):
    model, tok = tiny_llama
    ids = random_ids(900, len(tok), seed=10)
    kept = {}
    for n in ("det", 1):
        for seed in (1, 2):
            policy = make_policy("nexus_reservoir", n=n)
            stream = InferenceStream(model, tok, policy, budget=400, chunk_size=64, seed=seed)
            stream.append(ids)
            kept[n, seed] = [layer.positions.tolist() for layer in stream.cache.layers]
    assert kept["det", 1] == kept["det", 2]
    assert kept[1, 1] != kept[1, 2]


def test_template_that_rerenders_history_is_refused_and_changes_nothing(tokenizer):
    """A chat template that rewrites earlier turns when one is added (here: a running message count in the header)
    cannot be streamed incrementally; the failed message must not be recorded."""
    import copy

    from nexus.runtime.chat import ChatRenderer

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = "{{ messages|length }} messages\n{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    chat = ChatRenderer(tok)
    chat.add("user", "first")
    with pytest.raises(NexusError, match="re-renders earlier messages"):
        chat.add("user", "second")
    assert chat.messages == [{"role": "user", "content": "first"}]
