"""window_block_scores: reference == naive formula; Triton kernel == reference on awkward shapes."""
from __future__ import annotations

import math

import pytest
import torch

from nexus.kernels import window_block_scores
from nexus.kernels.window_scores_ref import window_block_scores_ref


def _naive(q: torch.Tensor, k: torch.Tensor, b: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition spelled out with loops and a materialized softmax per head, in float64."""
    hq, w, d = q.shape
    hkv, length, _ = k.shape
    group = hq // hkv
    n_blocks = math.ceil(length / b)
    probs = torch.zeros(hq, w, length, dtype=torch.float64)
    for h in range(hq):
        s = (q[h].double() @ k[h // group].double().T) / math.sqrt(d)
        for i in range(w):
            vis = [j for j in range(length) if j <= offset + i]
            if vis:
                probs[h, i, vis] = torch.softmax(s[i, vis], dim=0)
    mean = probs.mean(0)
    dist = torch.zeros(w, n_blocks, dtype=torch.float64)
    for i in range(w):
        for blk in range(n_blocks):
            dist[i, blk] = mean[i, blk * b:(blk + 1) * b].sum()
        if dist[i].sum() > 0:
            dist[i] /= dist[i].sum()
    tok = torch.stack([probs[g * group:(g + 1) * group].mean(0).sum(0) for g in range(hkv)])
    return dist, tok


@pytest.mark.parametrize("hq,hkv,w,length,b,offset", [
    (4, 4, 5, 37, 8, None),      # L not a multiple of b
    (6, 2, 8, 5, 4, None),       # L < W: the first rows see nothing
    (8, 1, 3, 20, 7, 2),         # GQA 8, odd block, explicit offset
    (3, 1, 4, 9, 16, -2),        # one partial block, rows that see nothing
])
def test_reference_equals_naive_formula(hq: int, hkv: int, w: int, length: int, b: int, offset: int | None) -> None:
    g = torch.Generator().manual_seed(hq * 100 + length)
    q = torch.randn(hq, w, 16, generator=g, dtype=torch.float64)
    k = torch.randn(hkv, length, 16, generator=g, dtype=torch.float64)
    off = length - w if offset is None else offset
    dist, tok = window_block_scores_ref(q, k, b, causal_offset=offset, token_scores=True,
                                        compute_dtype=torch.float64)
    want_dist, want_tok = _naive(q, k, b, off)
    # float64 with a different summation order: equal to the last few ulp.
    torch.testing.assert_close(dist, want_dist, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(tok, want_tok, rtol=1e-12, atol=1e-15)


def _inputs(hq: int, hkv: int, w: int, length: int, d: int, dtype: torch.dtype, device: str, seed: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # Spread-out logits (scale ~3 after 1/sqrt(D)) so the softmax is far from uniform.
    q = (torch.randn(hq, w, d, generator=g) * 1.7).to(dtype).to(device)
    k = (torch.randn(hkv, length, d, generator=g) * 1.7).to(dtype).to(device)
    return q, k


def _check(q: torch.Tensor, k: torch.Tensor, b: int, tol: dict[str, float], force_backend, **kw) -> None:
    force_backend("torch")
    ref_dist, ref_tok = window_block_scores(q.cpu(), k.cpu(), b, token_scores=True, **kw)
    force_backend("triton")
    dist, tok = window_block_scores(q, k, b, token_scores=True, **kw)
    assert dist.dtype == torch.float32 and dist.shape == ref_dist.shape
    torch.testing.assert_close(dist.cpu(), ref_dist, **tol)
    torch.testing.assert_close(tok.cpu(), ref_tok, **tol)
    sums = dist.sum(-1).cpu()
    live = ref_dist.sum(-1) > 0
    torch.testing.assert_close(sums[live], torch.ones(int(live.sum())), atol=1e-5, rtol=0)
    assert bool((sums[~live] == 0).all())
    no_tok, none = window_block_scores(q, k, b, **kw)
    assert none is None and torch.equal(no_tok, dist)


@pytest.mark.parametrize("ratio", [1, 3, 8])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("length", [200, 11])   # 200: not a multiple of b=32; 11 < W=16
def test_triton_matches_reference(ratio: int, d: int, dtype: torch.dtype, length: int, device: str,
                                  score_tol: dict[str, float], force_backend) -> None:
    hkv = 2 if ratio < 8 else 1
    q, k = _inputs(hkv * ratio, hkv, 16, length, d, dtype, device, seed=ratio * 1000 + d + length)
    _check(q, k, 32, score_tol, force_backend)


@pytest.mark.parametrize("b,length,w", [
    (16, 300, 16),   # several blocks per tile, partial last tile
    (48, 250, 9),    # non power of two block: one masked block per tile; W not a power of two
    (256, 700, 4),   # block larger than a tile: computed per 128-key segment, then summed
    (1, 40, 3),      # token-level blocks
    (331, 331, 5),   # one block holding every key (b = L, as token-score callers pass), prime L
])
def test_triton_block_sizes(b: int, length: int, w: int, device: str, score_tol: dict[str, float],
                            force_backend) -> None:
    q, k = _inputs(4, 2, w, length, 64, torch.float32, device, seed=b + length)
    _check(q, k, b, score_tol, force_backend)


@pytest.mark.parametrize("offset", [-20, 0, 50])
def test_triton_causal_offset_and_scale(offset: int, device: str, score_tol: dict[str, float],
                                        force_backend) -> None:
    q, k = _inputs(4, 1, 16, 130, 64, torch.float32, device, seed=offset + 99)
    _check(q, k, 32, score_tol, force_backend, causal_offset=offset, scale=0.3)


@pytest.mark.parametrize("hq,hkv,w,length", [
    (8, 1, 32, 150),    # 8 heads x 32 rows > 128: heads split over two programs (token scores via atomics)
    (2, 1, 150, 160),   # W > 128: window rows split over programs
])
def test_triton_row_splits(hq: int, hkv: int, w: int, length: int, device: str, score_tol: dict[str, float],
                           force_backend) -> None:
    q, k = _inputs(hq, hkv, w, length, 64, torch.float32, device, seed=w)
    _check(q, k, 32, score_tol, force_backend)


def test_noncontiguous_inputs(device: str, score_tol: dict[str, float], force_backend) -> None:
    # Views as the cache hands them out: [B, H, L, D] sliced on batch, queries transposed from [W, H, D].
    q, k = _inputs(6, 2, 16, 90, 64, torch.bfloat16, device, seed=5)
    q_view = q.transpose(0, 1).contiguous().transpose(0, 1)
    k_view = torch.cat([k, k], dim=1)[:, :90]
    assert not q_view.is_contiguous() and not k_view.is_contiguous()
    _check(q_view, k_view, 32, score_tol, force_backend)


def test_shape_errors() -> None:
    with pytest.raises(ValueError):
        window_block_scores(torch.randn(3, 4, 8), torch.randn(2, 10, 8), 4)
    with pytest.raises(ValueError):
        window_block_scores(torch.randn(4, 4, 8), torch.randn(2, 10, 16), 4)
    with pytest.raises(ValueError):
        window_block_scores(torch.randn(4, 4, 8), torch.randn(2, 10, 8), 0)
