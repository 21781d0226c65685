"""Reservoir keys: Triton == torch reference, the Efraimidis-Spirakis law holds, top-K follows the contract."""
from __future__ import annotations

import math

import pytest
import torch

from nexus import kernels
from nexus.kernels import reservoir_log_priorities, reservoir_priorities, reservoir_topk
from nexus.kernels.philox import randint, uniform_open01


def _weights(device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    w = torch.rand(777, generator=g) ** 3
    w[::11] = 0.0          # zero weights
    w[5] = 1e-25           # priority underflows, log priority does not
    w[6] = 3e-25
    return w.to(device)


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("seed,offset", [(0, 0), (9, 123456), (2**40 + 1, 2**33)])
def test_triton_matches_reference(n: int, seed: int, offset: int, device: str, force_backend) -> None:
    w = _weights(device)
    force_backend("torch")
    ref, ref_log = reservoir_priorities(w.cpu(), n, seed, offset), reservoir_log_priorities(w.cpu(), n, seed, offset)
    ref_top = reservoir_topk(w.cpu(), 100, n, seed, offset)
    force_backend("triton")
    got, got_log = reservoir_priorities(w, n, seed, offset).cpu(), reservoir_log_priorities(w, n, seed, offset).cpu()
    got_top = reservoir_topk(w, 100, n, seed, offset).cpu()
    # Same Philox uniforms bit for bit; only log/exp rounding may differ (float32, a few ulp).
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-7)
    pos = w.cpu() > 0
    torch.testing.assert_close(got_log[pos], ref_log[pos], rtol=1e-5, atol=1e-6)
    assert bool(torch.isneginf(got_log[~pos]).all()) and bool((got[~pos] == 0).all())
    assert torch.equal(got_top, ref_top)


def test_reference_is_the_formula() -> None:
    w = torch.tensor([0.3, 2.0, 0.0, 0.05])
    n, seed, offset = 4, 77, 10
    counters = offset + torch.arange(4)[:, None] * n + torch.arange(n)[None, :]
    u = uniform_open01(randint(seed, counters)).double()
    expected = (u ** (1.0 / w.double().clamp_min(1e-30))[:, None]).mean(1)
    expected[2] = 0.0
    torch.testing.assert_close(reservoir_priorities(w, n, seed, offset).double(), expected, rtol=1e-6, atol=0)


def test_tiny_weights_rank_by_log_priority() -> None:
    w = torch.tensor([0.0, 1e-30, 1e-20, 0.0])
    log_p = reservoir_log_priorities(w, 5, seed=3)
    assert bool((reservoir_priorities(w, 5, seed=3)[1:3] == 0).all())  # underflow in the plain priority
    assert bool(torch.isfinite(log_p[1:3]).all()) and log_p[2] > log_p[1]
    assert reservoir_topk(w, 2, 5, seed=3).tolist() == [1, 2]        # never a zero weight over a positive one
    assert reservoir_topk(w, 3, 5, seed=3).tolist() == [0, 1, 2]     # ties among zeros: lower index first


def test_topk_contract() -> None:
    w = torch.rand(50)
    assert torch.equal(reservoir_topk(w, 50, 5, 1), torch.arange(50))
    assert torch.equal(reservoir_topk(w, 80, 5, 1), torch.arange(50))
    idx = reservoir_topk(w, 10, 5, 1)
    assert idx.dtype == torch.long and idx.numel() == 10 and bool((idx[1:] > idx[:-1]).all())
    assert torch.equal(idx, reservoir_topk(w, 10, 5, 1))             # same seed, same set
    assert not torch.equal(reservoir_topk(w, 25, 5, 1), reservoir_topk(w, 25, 5, 2))


def test_counter_layout_offset_shifts_the_stream() -> None:
    w = torch.rand(40) + 0.1
    n = 3
    full = reservoir_priorities(w, n, seed=5, offset=0)
    tail = reservoir_priorities(w[10:], n, seed=5, offset=10 * n)    # element j uses counters offset + j*n + i
    assert torch.equal(full[10:], tail)


def test_single_draw_follows_efraimidis_spirakis_law() -> None:
    # n = 1, k = 1: the largest key u**(1/w) wins with probability w_j / sum(w). Trials are independent because
    # every (trial, item) pair has its own Philox counter.
    w = torch.tensor([1.0, 2.0, 5.0])
    trials = 6000
    pri = reservoir_priorities(w.repeat(trials), 1, seed=11).reshape(trials, 3)
    freq = torch.bincount(pri.argmax(1), minlength=3).double() / trials
    expect = w.double() / w.sum()
    sigma = torch.sqrt(expect * (1 - expect) / trials)
    assert bool(((freq - expect).abs() < 4 * sigma).all()), (freq, expect)


def test_larger_n_concentrates_on_heavy_items() -> None:
    # n-averaging pulls keys towards their mean w/(w+1): with n = 50 the heaviest item wins far more often.
    w = torch.tensor([1.0, 2.0, 5.0])
    trials = 3000
    wins = [torch.bincount(reservoir_priorities(w.repeat(trials), n, seed=4).reshape(trials, 3).argmax(1),
                           minlength=3)[2].item() / trials for n in (1, 50)]
    assert wins[0] == pytest.approx(5 / 8, abs=0.05) and wins[1] > 0.95


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        reservoir_priorities(torch.rand(3), 0, seed=1)
    with pytest.raises(ValueError):
        reservoir_priorities(torch.rand(3), 2, seed=-1)
    assert math.isinf(float(reservoir_log_priorities(torch.zeros(1), 2, 1)[0]))


def test_ids_make_draws_follow_the_element() -> None:
    w = torch.rand(300, generator=torch.Generator().manual_seed(0)) + 0.01
    ids = torch.randperm(10_000, generator=torch.Generator().manual_seed(1))[:300]
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(2))
    got = kernels.reservoir_log_priorities(w, 5, seed=11, ids=ids)
    assert torch.equal(kernels.reservoir_log_priorities(w[perm], 5, seed=11, ids=ids[perm]), got[perm])
    assert torch.equal(kernels.reservoir_log_priorities(w, 5, seed=11, ids=torch.arange(300)),
                       kernels.reservoir_log_priorities(w, 5, seed=11))
    with pytest.raises(ValueError, match="one non-negative id per weight"):
        kernels.reservoir_log_priorities(w, 5, seed=11, ids=ids[:10])


def test_triton_matches_reference_with_ids(force_backend) -> None:
    w = torch.rand(200, generator=torch.Generator().manual_seed(3)) ** 3
    ids = torch.arange(200) * 37 + 5
    force_backend("torch")
    ref = kernels.reservoir_log_priorities(w, 4, seed=9, offset=100, ids=ids)
    force_backend("triton")
    got = kernels.reservoir_log_priorities(w, 4, seed=9, offset=100, ids=ids)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
