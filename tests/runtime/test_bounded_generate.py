"""`nexus.bounded`: unchanged `model.generate` and pipelines keep every layer within budget, like a stream does."""

from __future__ import annotations

import pytest
import torch
from transformers import CompileConfig, DynamicCache, StoppingCriteria, StoppingCriteriaList, pipeline

import nexus
from nexus.errors import NexusError
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.bounded import EvictingCache
from nexus.runtime.budget import kv_bytes_per_token
from nexus.runtime.cache import BoundedCache
from tests.runtime.test_stream_exactness import random_ids

BUDGET, CHUNK, TAU = 400, 64, 8


class StoredAfterEachStep(StoppingCriteria):
    """Called by generate after every forward (after nexus.bounded's eviction): records what each layer stores."""

    def __init__(self, bounded):
        self.bounded = bounded
        self.steps: list[list[int]] = []

    def __call__(self, input_ids, scores, **kwargs):
        self.steps.append(self.bounded.cache.stored_lengths())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def stream_tokens(model, tok, ids, policy, new, **params):
    stream = InferenceStream(model, tok, make_policy(policy, decode_period=TAU, **params), budget=BUDGET,
                             chunk_size=CHUNK)
    stream.append(ids)
    return stream.generate(new).token_ids, stream


@pytest.mark.parametrize("policy, params", [("nexus", {}), ("h2o", {}), ("nexus", {"anchor_tokens": 16})],
                         ids=["nexus", "h2o", "nexus anchor"])
def test_generate_equals_stream_and_stays_within_budget(tiny, policy, params):
    model, tok = tiny
    ids = random_ids(700, len(tok), seed=11)
    want, stream = stream_tokens(model, tok, ids, policy, 40, **params)
    with nexus.bounded(model, policy, BUDGET, chunk_size=CHUNK, decode_period=TAU, **params) as bounded:
        record = StoredAfterEachStep(bounded)
        out = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False, return_dict_in_generate=True,
                             stopping_criteria=StoppingCriteriaList([record]))
    assert out.sequences[0, len(ids):].tolist() == want
    cache = out.cache
    assert cache is bounded.cache and isinstance(cache, EvictingCache)
    # after the prompt (fed in chunks, evicted after each) every layer is within budget; during decode it may
    # hold the up to tau tokens waiting for the next eviction, which happens every tau steps
    assert max(record.steps[0]) <= BUDGET
    assert all(max(step) <= BUDGET + TAU for step in record.steps)
    decode = [max(step) for step in record.steps]
    assert any(b < a for a, b in zip(decode, decode[1:])), "no eviction during decode"
    stats = bounded.stats
    assert stats.peak_tokens_stored <= BUDGET + max(CHUNK, TAU)
    assert stats.prefill_tokens == len(ids) and stats.decode_tokens == 39  # generate never feeds its last token
    assert stats.tokens_seen == cache.seen == len(ids) + 39
    assert stats.eviction_events >= len(ids) // CHUNK - BUDGET // CHUNK + 39 // TAU
    assert stats.cache_bytes == stream.stats.cache_bytes  # the same preallocated budget + max(chunk, tau)
    assert cache.stored_lengths() == [max(record.steps[-1])] * model.config.num_hidden_layers


def test_budget_above_length_equals_plain_generate(tiny):
    model, tok = tiny
    ids = torch.tensor([random_ids(300, len(tok), seed=12)])
    plain = model.generate(ids, max_new_tokens=30, do_sample=False, return_dict_in_generate=True, output_logits=True)
    assert isinstance(plain.cache, DynamicCache)
    with nexus.bounded(model, "nexus", 4096, chunk_size=CHUNK) as bounded:
        out = model.generate(ids, max_new_tokens=30, do_sample=False, return_dict_in_generate=True,
                             output_logits=True)
    assert bounded.stats.eviction_events == 0
    assert out.sequences.tolist() == plain.sequences.tolist()
    # chunked prefill and another attention function round differently; nothing else differs
    worst = max(float((a - b).abs().max()) for a, b in zip(out.logits, plain.logits))
    assert worst < 1e-4, worst


def test_pipeline_is_bounded_and_equals_stream(tiny_llama):
    model, tok = tiny_llama
    prompt = " ".join(f"line {i}: value={i * 7 % 13}" for i in range(120))
    ids = tok(prompt).input_ids
    assert len(ids) > 3 * BUDGET // 2
    pipe = pipeline("text-generation", model=model, tokenizer=tok)
    with nexus.bounded(model, "nexus", BUDGET, chunk_size=CHUNK, decode_period=TAU) as bounded:
        result = pipe(prompt, max_new_tokens=24, do_sample=False, return_tensors=True)
    want, _ = stream_tokens(model, tok, ids, "nexus", 24)
    assert result[0]["generated_token_ids"][len(ids):] == want
    assert bounded.stats.eviction_events > 0 and bounded.stats.prefill_tokens == len(ids)
    assert bounded.stats.peak_tokens_stored <= BUDGET + CHUNK
    assert max(bounded.cache.stored_lengths()) <= BUDGET + TAU


def test_density_and_byte_budgets(tiny_llama):
    model, tok = tiny_llama
    ids = torch.tensor([random_ids(600, len(tok), seed=13)])
    with nexus.bounded(model, "nexus", 0.5) as bounded:
        model.generate(ids, max_new_tokens=5, do_sample=False)
    assert bounded.cache.budget == 300  # floor(0.5 x 600 prompt tokens)
    assert bounded.cache.chunk_size <= 300 - make_policy("nexus").min_budget()  # the default chunk shrank to fit
    assert max(bounded.cache.stored_lengths()) <= 300 + make_policy("nexus").decode_period
    assert bounded.stats.eviction_events > 0
    per_token = kv_bytes_per_token(model.config, torch.float32)
    with nexus.bounded(model, "streaming_llm", f"{per_token * 256 / 2**10}KiB", chunk_size=CHUNK) as bounded:
        model.generate(ids, max_new_tokens=5, do_sample=False)
    # a byte size caps the allocated buffers: the room each layer keeps for a chunk comes out of the 256 tokens
    assert bounded.cache.budget == 256 - CHUNK and max(bounded.cache.stored_lengths()) <= 256 - CHUNK + 16
    assert bounded.cache.allocated_bytes() <= per_token * 256


@pytest.mark.parametrize("kwargs, match", [
    (dict(policy="top_k_magic"), "Unknown policy"),
    (dict(budget=0), "[Bb]udget"),
    (dict(budget=-5), "[Bb]udget"),
    (dict(budget=1.5), "density"),
    (dict(budget=0.0), "density"),
    (dict(budget=float("nan")), "density"),
    (dict(budget="lots"), "[Bb]udget"),
    (dict(budget=40, chunk_size=64), "forced tokens"),
    (dict(chunk_size=0), "chunk_size"),
    (dict(lam=-1), "lam"),
])
def test_bad_arguments_are_one_sentence(tiny_llama, kwargs, match):
    model, _ = tiny_llama
    with pytest.raises(NexusError, match=match) as err:
        nexus.bounded(model, **kwargs)
    assert str(err.value).count(". ") == 0, str(err.value)
    assert model.config._attn_implementation == "sdpa" and "generate" not in vars(model)


@pytest.mark.parametrize("call, match", [
    (lambda m, ids: m.generate(ids.repeat(2, 1), max_new_tokens=2), "batch size 1"),
    (lambda m, ids: m.generate(ids, max_new_tokens=2, num_beams=2), "beam search"),
    (lambda m, ids: m.generate(ids, attention_mask=torch.cat([torch.zeros(1, 1, dtype=torch.long),
                                                              torch.ones(1, ids.shape[1] - 1, dtype=torch.long)], 1),
                               max_new_tokens=2), "padding"),
    (lambda m, ids: m.generate(ids, max_new_tokens=2, cache=DynamicCache(config=m.config)), "DynamicCache"),
    (lambda m, ids: m.generate(ids, max_new_tokens=2, prefill_chunk_size=7), "chunk_size"),
])
def test_unsupported_generate_calls_are_refused(tiny_llama, call, match):
    model, tok = tiny_llama
    ids = torch.tensor([random_ids(20, len(tok))])
    with nexus.bounded(model, "nexus", BUDGET, chunk_size=CHUNK):
        with pytest.raises(NexusError, match=match) as err:
            call(model, ids)
    assert str(err.value).count(". ") == 0, str(err.value)


def test_exit_restores_the_model(tiny_llama):
    model, tok = tiny_llama
    ids = torch.tensor([random_ids(20, len(tok))])
    with nexus.bounded(model, "nexus", BUDGET) as bounded:
        assert model.config._attn_implementation == "nexus_sdpa"
        with pytest.raises(NexusError, match="already inside"):
            with nexus.bounded(model, "random", BUDGET):
                pass
        model.generate(ids, max_new_tokens=2)
    assert model.config._attn_implementation == "sdpa"
    assert "generate" not in vars(model) and not model._forward_hooks and not model._forward_pre_hooks
    out = model.generate(ids, max_new_tokens=2, return_dict_in_generate=True)
    assert isinstance(out.cache, DynamicCache)
    assert bounded.cache.seen == 21  # the bounded call's cache is still readable after the block


def test_works_in_and_out_of_inference_mode(tiny_llama):
    model, tok = tiny_llama
    first = torch.tensor([random_ids(500, len(tok), seed=14)])
    with nexus.bounded(model, "nexus", BUDGET, chunk_size=CHUNK, decode_period=TAU) as bounded:
        with torch.inference_mode():  # the cache's buffers become inference tensors here
            out = model.generate(first, max_new_tokens=10, do_sample=False, return_dict_in_generate=True)
        # a second turn on the returned cache, outside inference mode: only the new tokens are prefilled
        second = torch.cat([out.sequences, torch.tensor([random_ids(100, len(tok), seed=15)])], dim=1)
        again = model.generate(second, cache=out.cache, max_new_tokens=10, do_sample=False,
                               return_dict_in_generate=True)
    assert again.cache is out.cache is bounded.cache
    assert bounded.stats.prefill_tokens == 500 + 101 and bounded.stats.tokens_seen == second.shape[1] + 9
    assert max(bounded.cache.stored_lengths()) <= BUDGET + TAU
    # a stream's cache (filled under inference mode) in a plain generate outside it: no error
    stream = InferenceStream(model, tok, make_policy("nexus"), budget=BUDGET, chunk_size=CHUNK)
    stream.append(first[0].tolist())
    plain = model.generate(torch.cat([first, first[:, :1]], 1), cache=stream.cache, max_new_tokens=3,
                           do_sample=False)
    assert plain.shape[1] == 504
    model.set_attn_implementation("sdpa")


def test_a_stream_inside_the_block_is_not_evicted_twice(tiny_llama):
    model, tok = tiny_llama
    ids = random_ids(700, len(tok), seed=16)
    want, outside = stream_tokens(model, tok, ids, "nexus", 20)
    with nexus.bounded(model, "nexus", BUDGET, chunk_size=CHUNK, decode_period=TAU):
        got, inside = stream_tokens(model, tok, ids, "nexus", 20)
    assert got == want
    assert inside.stats.eviction_events == outside.stats.eviction_events
    assert inside.stats.prefill_tokens == len(ids) and inside.stats.decode_tokens == 20


def test_not_compileable_and_compile_config_does_not_fail(tiny_llama):
    model, tok = tiny_llama
    ids = torch.tensor([random_ids(30, len(tok))])
    assert BoundedCache(2).is_compileable is False
    compile_everywhere = CompileConfig()
    compile_everywhere._compile_all_devices = True  # would compile on CPU too, were the cache compileable
    with nexus.bounded(model, "nexus", BUDGET) as bounded:
        model.generate(ids, max_new_tokens=3, do_sample=False, compile_config=compile_everywhere)
    assert bounded.cache.is_compileable is False
    model.generate(ids, max_new_tokens=3, cache=BoundedCache(model.config.num_hidden_layers),
                   compile_config=compile_everywhere)


def test_import_nexus_stays_cheap():
    import subprocess
    import sys

    code = "import sys, nexus; print([m for m in ('torch', 'transformers') if m in sys.modules])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


@pytest.mark.slow
def test_embedded_model_generate_equals_stream(embedded):
    model, tok = embedded
    text = "Summarize this build log:\n" + "\n".join(f"[{i:03d}] compiling module_{i}.c ... ok" for i in range(40))
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    assert len(ids) > BUDGET
    # nexus.bounded sees no per-position logits, so it keeps no surprise slice; compare the drivers without it
    want, _ = stream_tokens(model, tok, ids, "nexus", 16, surprise_share=0.0)
    with nexus.bounded(model, "nexus", BUDGET, chunk_size=CHUNK, decode_period=TAU, surprise_share=0.0) as bounded:
        out = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
    assert out[0, len(ids):].tolist() == want  # both stop after the same end-of-turn token, if one comes
    assert bounded.stats.eviction_events > 0 and bounded.stats.peak_tokens_stored <= BUDGET + CHUNK
