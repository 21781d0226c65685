"""The torch Philox must be Philox4x32-10 and produce exactly what Triton's tl.randint produces."""
from __future__ import annotations

import pytest
import torch

from nexus.kernels.philox import philox4x32, randint, uniform_open01


@pytest.mark.parametrize("ctr,key,expected", [
    # Known-answer vectors of Random123 (kat_vectors, philox4x32 10 rounds).
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(ctr: tuple[int, ...], key: tuple[int, int], expected: tuple[int, ...]) -> None:
    out = philox4x32(*(torch.tensor([c]) for c in ctr), *key)
    assert tuple(int(o) for o in out) == expected


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 + 7, 2**62 + 3])
def test_torch_randint_matches_triton(seed: int, device: str) -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def _draw(off_ptr, out_ptr, seed, count, BLOCK: tl.constexpr):
        j = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        off = tl.load(off_ptr + j, mask=j < count, other=0)
        tl.store(out_ptr + j, tl.randint(seed, off).to(tl.int64, bitcast=False), mask=j < count)

    offsets = torch.cat([torch.arange(0, 300), torch.tensor([2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40 + 5,
                                                             2**62 + 11])]).to(device)
    out = torch.empty_like(offsets)
    _draw[(triton.cdiv(offsets.numel(), 64),)](offsets, out, seed, offsets.numel(), BLOCK=64)
    # Triton's word is uint32; widened to int64 it must equal our value in [0, 2**32).
    assert torch.equal(out & 0xFFFFFFFF, randint(seed, offsets))


def test_uniform_never_hits_zero_or_one() -> None:
    u = uniform_open01(torch.tensor([0, 1, 511, 512, 2**31, 2**32 - 1]))
    assert u.dtype == torch.float32
    assert bool((u > 0).all()) and bool((u < 1).all())
    assert float(u[0]) == 0.5 / 2**23 and float(u[-1]) == 1 - 0.5 / 2**23
