"""The CUDA paths: in-place compaction in the cache's own buffers, and streams on the GPU in fp32 and bf16 computing
what the model computes (evicted stream == masked full forward, within this device's measured rounding noise)."""
from __future__ import annotations

import pytest
import torch

from nexus.kernels import set_backend
from nexus.runtime import InferenceStream, make_policy
from nexus.runtime.cache import BoundedLayer
from nexus.runtime.id_tokenizer import id_tokenizer
from tests.conftest import tiny_model
from tests.runtime.reference import (VisibilityLog, causal_masks, leak_one_evicted_key, masked_full_forward,
                                    tolerance, worst_difference)

pytestmark = pytest.mark.cuda
VOCAB = 512


def filled_layer(device: str, dtype: torch.dtype, heads: int = 4, length: int = 300, dim: int = 64):
    g = torch.Generator().manual_seed(length)
    keys = torch.randn(1, heads, length, dim, generator=g).to(dtype)
    values = torch.randn(1, heads, length, dim, generator=g).to(dtype)
    layer = BoundedLayer()
    layer.reserve(length + 64)
    layer.update(keys.to(device), values.to(device))
    return layer, keys, values


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_keep_compacts_in_place_in_the_cache_buffer(gpu, dtype, monkeypatch):
    import nexus.kernels.compact_triton as compact_triton

    calls = []
    if gpu == "cuda":
        real = compact_triton.compact_in_place
        monkeypatch.setattr(compact_triton, "compact_in_place", lambda *a: calls.append(1) or real(*a))
    layer, keys, values = filled_layer(gpu, dtype)
    k_ptr, v_ptr = layer._k_buf.data_ptr(), layer._v_buf.data_ptr()
    keep = torch.randperm(300, generator=torch.Generator().manual_seed(1))[:120].sort().values
    layer.keep(keep.to(gpu))
    assert layer.stored == 120
    assert torch.equal(layer.keys.cpu(), keys[:, :, keep]) and torch.equal(layer.values.cpu(), values[:, :, keep])
    assert torch.equal(layer.positions.cpu(), keep)
    # same buffers, no reallocation: the cache's memory stays at what was reserved
    assert (layer._k_buf.data_ptr(), layer._v_buf.data_ptr()) == (k_ptr, v_ptr)
    if gpu == "cuda":
        assert calls == [1], "the in-place Triton kernel was not the path taken"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_head_keep_pads_and_masks_on_device(gpu, dtype):
    layer, keys, values = filled_layer(gpu, dtype)
    g = torch.Generator().manual_seed(2)
    rows = [torch.randperm(300, generator=g)[:n].sort().values for n in (100, 90, 100, 80)]
    keep = torch.full((4, 100), -1, dtype=torch.long)
    for h, row in enumerate(rows):
        keep[h, : len(row)] = row
    layer.keep(keep.to(gpu))
    bias = layer.token_state["logit_bias"].cpu()
    for h, row in enumerate(rows):
        n = len(row)
        assert torch.equal(layer.keys[0, h, :n].cpu(), keys[0, h, row])
        assert torch.equal(layer.values[0, h, :n].cpu(), values[0, h, row])
        assert torch.isneginf(bias[h, n:]).all() and (bias[h, :n] == 0).all()
    assert layer.useful_slots == sum(len(r) for r in rows)


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def evicted_stream_vs_masked_forward(model, tok, policy: str, record_property):
    """Prefill in chunks and decode with eviction. Returns the worst |logit diff| vs the masked forward, the
    tolerance (this device's dense rounding noise, scaled), and the diff the tolerance must catch when one evicted
    key leaks back in and when no key is evicted at all (the mask ignored)."""
    ids = random_ids(900, seed=4)
    stream = InferenceStream(model, tok, make_policy(policy, decode_period=8), budget=320, chunk_size=64, seed=1)
    log = VisibilityLog(model.config.num_hidden_layers)
    seen = []
    for s in range(0, len(ids), 64):
        log.before(stream, len(ids[s : s + 64]))
        stream.append(ids[s : s + 64])
        seen.append((min(s + 64, len(ids)) - 1, stream.last_logits.clone()))
    fed = list(ids)
    for _ in range(24):
        log.before(stream, 1)
        fed += stream.generate(1).token_ids
        seen.append((len(fed) - 1, stream.last_logits.clone()))
    assert stream.stats.eviction_events >= 10
    masks = log.masks(len(fed))
    worst = worst_difference(masked_full_forward(model, fed, masks), seen)
    tol = tolerance(model, tok, fed, log.feeds(), [t for t, _ in seen])
    leaked, _ = leak_one_evicted_key(masks)
    one_key = worst_difference(masked_full_forward(model, fed, leaked), seen)
    no_eviction = worst_difference(masked_full_forward(model, fed, causal_masks(len(masks), len(fed))), seen)
    for name, value in (("worst", worst), ("tolerance", tol), ("one_key_leak", one_key),
                        ("mask_ignored", no_eviction)):
        record_property(name, value)
    return worst, tol, one_key, no_eviction


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_stream_on_device_equals_masked_forward(gpu, dtype, kind, record_property):
    model = tiny_model(kind, VOCAB, initializer_range=0.05).to(device=gpu, dtype=dtype)
    worst, tol, one_key, no_eviction = evicted_stream_vs_masked_forward(model, id_tokenizer(VOCAB), "nexus_reservoir",
                                                                        record_property)
    assert worst <= tol, (worst, tol)
    # The tolerance still catches a wrong mask. In fp32 that is one evicted key seen again; bf16's rounding noise on
    # this tiny random model (near-uniform attention over ~300 keys) is larger than one key's share, so there the
    # check is that attention did not see the evicted keys at all.
    caught = one_key if dtype == torch.float32 else no_eviction
    assert caught > 4 * tol, (caught, tol)


def test_triton_and_torch_kernels_keep_the_same_tokens(gpu):
    """The stream's eviction decisions do not depend on which kernel implementation scored the window."""
    model = tiny_model("llama", VOCAB).to(gpu)
    tok = id_tokenizer(VOCAB)
    kept = {}
    try:
        for backend in ("torch", "triton" if gpu == "cuda" else "torch"):
            set_backend(backend)
            stream = InferenceStream(model, tok, make_policy("nexus_reservoir"), budget=320, chunk_size=64, seed=1)
            stream.append(random_ids(1200, seed=5))
            kept[backend] = [layer.positions.cpu() for layer in stream.cache.layers]
    finally:
        set_backend("auto")
    ref, got = kept["torch"], kept.get("triton", kept["torch"])
    for a, b in zip(ref, got):
        overlap = len(set(a.tolist()) & set(b.tolist())) / len(set(a.tolist()) | set(b.tolist()))
        assert overlap >= 0.95, overlap


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_embedded_model_on_device_equals_masked_forward(gpu, dtype, record_property):
    """The embedded SmolLM2-135M on the device, in the dtype users run it in: the same exactness as on CPU."""
    from nexus.errors import NexusError
    from nexus.runtime import load_model

    try:
        model, tok = load_model("embedded", device=gpu, dtype=dtype)
    except NexusError as exc:  # a GPU machine without the model package: say so rather than fail the GPU run
        pytest.skip(f"embedded model not available here: {exc}")
    worst, tol, one_key, no_eviction = evicted_stream_vs_masked_forward(model, tok, "nexus_reservoir", record_property)
    assert worst <= tol, (worst, tol)
    if dtype == "float32":
        assert one_key > 4 * tol, (one_key, tol)
    # bf16: a dense stream fed in chunks already differs from the one-shot forward by ~0.7 in the logits (measured on
    # CPU; the GPU figures are in docs/gpu.md), as much as ignoring the eviction mask does (~3), so no max-|diff|
    # tolerance can tell a wrong mask from rounding there; the numbers are recorded, the check is fp32's.
