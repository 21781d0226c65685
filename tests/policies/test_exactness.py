"""Per-head keeps (H2O, SnapKV, padded Ada-SnapKV) and the logit bias of nexus_ht and nexus (hajek=true) compute what
the model computes: the stream's logits equal one uncached forward with each head's stored keys (and bias) as its
mask."""

from __future__ import annotations

import pytest
import torch

from nexus.runtime import InferenceStream, make_policy
from tests.policies.conftest import VOCAB, geometry_model, random_ids
from tests.policies.reference_heads import HeadLog, biased_full_forward
from tests.runtime.reference import tolerance, worst_difference


CASES = {"h2o": ("h2o", {}), "snapkv": ("snapkv", {}), "ada_snapkv": ("ada_snapkv", {}), "morphkv": ("morphkv", {}),
         "nexus_ht": ("nexus_ht", {}), "nexus": ("nexus", {}),
         "nexus joint": ("nexus", {"joint_layers": True}), "nexus anchor": ("nexus", {"anchor_tokens": 24}),
         "nexus reask": ("nexus", {"anchor_tokens": 24, "anchor_reask": True})}


@pytest.mark.parametrize("case", sorted(CASES))
def test_stream_equals_head_masked_forward(tokenizer, case):
    name, params = CASES[case]
    model = geometry_model("gqa", VOCAB, seed=3)
    stream = InferenceStream(model, tokenizer, make_policy(name, mode="prefill+decode", decode_period=8, **params),
                             budget=200, chunk_size=48, seed=2)
    log = HeadLog(model.config.num_hidden_layers, model.config.num_key_value_heads)
    ids = random_ids(500, VOCAB, seed=5)
    logits = []
    for s in range(0, len(ids), 48):
        piece = ids[s : s + 48]
        log.before(stream, len(piece))
        stream.append(piece)
        logits.append((s + len(piece) - 1, stream.last_logits.clone()))
    fed = list(ids)
    for _ in range(24):
        log.before(stream, 1)
        fed += stream.generate(1, temperature=1.0, seed=len(fed)).token_ids
        logits.append((len(fed) - 1, stream.last_logits.clone()))
    assert stream.stats.eviction_events >= 8
    if name == "ada_snapkv":  # heads really kept different counts: padded slots allocated but not useful
        assert any(layer.useful_slots < layer.keys.shape[1] * layer.stored for layer in stream.cache.layers)
    if case in ("nexus_ht", "nexus"):  # the correction was really applied, so the check covers it
        assert any(float(layer.token_state.get("logit_bias", torch.zeros(1)).max()) > 0
                   for layer in stream.cache.layers)
    ref = biased_full_forward(model, fed, log.bias(len(fed)))
    tol = tolerance(model, tokenizer, fed, [(s, e) for s, e, _ in log.steps], [t for t, _ in logits])
    worst = worst_difference(ref, logits)
    assert worst <= tol, (worst, tol)
