"""compact_kv: the Triton gather copies exactly the rows the reference copies."""
from __future__ import annotations

import pytest
import torch

from nexus.kernels import compact_kv, compact_kv_into


def _kv(b: int, h: int, length: int, dk: int, dv: int, dtype: torch.dtype, device: str
        ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(length * 7 + dk)
    keys = torch.randn(b, h, length, dk, generator=g).to(dtype).to(device)
    values = torch.randn(b, h, length, dv, generator=g).to(dtype).to(device)
    return keys, values


def _both(keys: torch.Tensor, values: torch.Tensor, keep: torch.Tensor, force_backend):
    force_backend("torch")
    ref = compact_kv(keys.cpu(), values.cpu(), keep.cpu())
    force_backend("triton")
    got = compact_kv(keys, values, keep)
    return ref, got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("per_head", [False, True])
def test_triton_gather_is_exact(dtype: torch.dtype, per_head: bool, device: str, force_backend) -> None:
    keys, values = _kv(2, 3, 77, 64, 128, dtype, device)
    g = torch.Generator().manual_seed(1)
    if per_head:
        keep = torch.stack([torch.randperm(77, generator=g)[:45].sort().values for _ in range(3)])
    else:
        keep = torch.randperm(77, generator=g)[:45].sort().values
    (rk, rv), (gk, gv) = _both(keys, values, keep.to(device), force_backend)
    assert gk.shape == (2, 3, 45, 64) and gv.shape == (2, 3, 45, 128)
    assert gk.is_contiguous() and gv.is_contiguous() and gk.dtype == dtype
    assert torch.equal(gk.cpu(), rk) and torch.equal(gv.cpu(), rv)
    # The reference itself: row k of head h is input row keep[h, k].
    kh = keep if per_head else keep.expand(3, -1)
    for h in range(3):
        assert torch.equal(rk[:, h], keys.cpu()[:, h, kh[h]])


def test_strided_cache_views(device: str, force_backend) -> None:
    # A preallocated cache [B, H, capacity, D] of which only the first L slots are filled.
    keys, values = _kv(1, 2, 100, 64, 64, torch.bfloat16, device)
    k_view, v_view = keys[:, :, :60], values.transpose(2, 3).contiguous().transpose(2, 3)[:, :, :60]
    keep = torch.tensor([0, 1, 2, 3, 30, 31, 58, 59], device=device)
    (rk, rv), (gk, gv) = _both(k_view, v_view, keep, force_backend)
    assert torch.equal(gk.cpu(), rk) and torch.equal(gv.cpu(), rv)


def test_keep_everything_and_nothing(device: str, force_backend) -> None:
    keys, values = _kv(1, 2, 33, 64, 64, torch.float32, device)
    force_backend("triton")
    all_k, all_v = compact_kv(keys, values, torch.arange(33, device=device))
    assert torch.equal(all_k, keys) and torch.equal(all_v, values)
    none_k, _ = compact_kv(keys, values, torch.empty(0, dtype=torch.long, device=device))
    assert none_k.shape == (1, 2, 0, 64)


def test_shape_errors() -> None:
    keys = torch.randn(1, 2, 10, 8)
    with pytest.raises(ValueError):
        compact_kv(keys, torch.randn(1, 3, 10, 8), torch.arange(3))
    with pytest.raises(ValueError):
        compact_kv(keys, keys, torch.zeros(3, 4, dtype=torch.long))


def _cache(cap: int, length: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    k_buf, v_buf = _kv(2, 3, cap, 64, 32, torch.bfloat16, device)
    return k_buf, v_buf


@pytest.mark.parametrize("per_head", [False, True])
def test_in_place_compaction_of_a_cache_buffer(per_head: bool, device: str, force_backend) -> None:
    # The runtime's layout: preallocated [B, H, capacity, D], the first L rows filled. Sources lie far beyond
    # their destinations (keep ~ every third row) and span several 64-row chunks of the in-place kernel.
    length, n_keep = 500, 150
    g = torch.Generator().manual_seed(3)
    if per_head:
        keep = torch.stack([torch.randperm(length, generator=g)[:n_keep].sort().values for _ in range(3)])
        keep[1, -20:] = keep[1, -21]   # padded rows repeat their last real index, as the cache does
    else:
        keep = torch.randperm(length, generator=g)[:n_keep].sort().values
    k_buf, v_buf = _cache(640, length, device)
    force_backend("torch")
    want_k, want_v = compact_kv(k_buf[:, :, :length].cpu(), v_buf[:, :, :length].cpu(), keep)
    force_backend("triton")
    got_k, got_v = compact_kv_into(k_buf[:, :, :length], v_buf[:, :, :length], keep.to(device), k_buf, v_buf)
    assert got_k.data_ptr() == k_buf.data_ptr() and got_k.shape == (2, 3, n_keep, 64)
    assert torch.equal(got_k.cpu(), want_k) and torch.equal(got_v.cpu(), want_v)
    assert torch.equal(k_buf[:, :, :n_keep].cpu(), want_k)


@pytest.mark.parametrize("backend_name", ["torch", "triton"])
def test_into_falls_back_when_in_place_is_unsafe(backend_name: str, device: str, force_backend) -> None:
    k_buf, v_buf = _cache(64, 40, device)
    keep = torch.tensor([0, 0, 1, 1, 2, 5, 6, 7, 8, 9] + list(range(20, 80, 1))[:30], device=device)  # keep[k] < k
    force_backend("torch")
    want_k, want_v = compact_kv(k_buf[:, :, :40].cpu(), v_buf[:, :, :40].cpu(), keep.cpu().clamp_max(39))
    force_backend(backend_name)
    got_k, got_v = compact_kv_into(k_buf[:, :, :40], v_buf[:, :, :40], keep.clamp_max(39), k_buf, v_buf)
    assert torch.equal(got_k.cpu(), want_k) and torch.equal(got_v.cpu(), want_v)


def test_into_separate_buffers(device: str, force_backend) -> None:
    keys, values = _kv(1, 2, 90, 64, 64, torch.float32, device)
    k_buf, v_buf = torch.zeros(1, 2, 50, 64, device=device), torch.zeros(1, 2, 50, 64, device=device)
    keep = torch.arange(0, 90, 2, device=device)
    force_backend("triton")
    got_k, got_v = compact_kv_into(keys, values, keep, k_buf, v_buf)
    assert torch.equal(got_k, keys[:, :, ::2]) and torch.equal(got_v, values[:, :, ::2])
    assert bool((k_buf[:, :, 45:] == 0).all())
    with pytest.raises(ValueError):
        compact_kv_into(keys, values, torch.arange(60, device=device), k_buf, v_buf)
