"""Triton window_block_scores: one pass over K with an online (split) softmax.

Kernel 1 (grid: kv head x runs of key tiles) loads each K tile once, scores it against the W window queries of the
query heads of that KV group in one tl.dot (more than 128 head x window rows are split over programs), and writes
per (head, row) only the tile max and the per-segment sums of exp2(s - tile max): [Hq, W, L/seg] floats,
seg = block size (<=128), never the [Hq, W, L] probabilities.
Kernel 2 (grid: Hq*W rows) merges the tile maxima into each row's log-sum-exp. Kernel 3 (grid: W x segment chunks)
rescales and averages over heads. With token_scores a fourth kernel re-reads K once to spread the normalized
probabilities over tokens (per KV group).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

_LOG2E = 1.4426950408889634


@triton.jit
def _window_rows(pid, n_win, GROUP: tl.constexpr, HP: tl.constexpr, WR: tl.constexpr, N_HC: tl.constexpr,
                 N_WC: tl.constexpr, ROWS: tl.constexpr):
    """Rows of one program: HP query heads x WR window rows of KV group g (pid = (g * N_HC + hc) * N_WC + wc)."""
    wc = pid % N_WC
    hc = (pid // N_WC) % N_HC
    g = pid // (N_WC * N_HC)
    r = tl.arange(0, ROWS)
    head_local = hc * HP + r // WR
    i = wc * WR + r % WR
    row_ok = (r < HP * WR) & (head_local < GROUP) & (i < n_win)
    return g, g * GROUP + head_local, i, row_ok


@triton.jit
def _partial_kernel(q_ptr, k_ptr, s_ptr, m_ptr,
                    sq_h, sq_w, sq_d, sk_h, sk_l, sk_d,
                    n_win, n_keys, n_seg, n_tiles, tiles_per_prog, causal_offset, qk_scale,
                    GROUP: tl.constexpr, HP: tl.constexpr, WR: tl.constexpr, N_HC: tl.constexpr,
                    N_WC: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr,
                    D_PAD: tl.constexpr, TILE: tl.constexpr, SEG: tl.constexpr, BPT: tl.constexpr,
                    CAST: tl.constexpr, PREC: tl.constexpr):
    g, head, i, row_ok = _window_rows(tl.program_id(0), n_win, GROUP, HP, WR, N_HC, N_WC, ROWS)
    d = tl.arange(0, D_PAD)
    q = tl.load(q_ptr + head[:, None] * sq_h + i[:, None] * sq_w + d[None, :] * sq_d,
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    if CAST:
        q = q.to(tl.float32)  # the interpreter cannot do bf16 math
    n = tl.arange(0, TILE)
    seg_local = tl.arange(0, BPT)
    row_base = (head * n_win + i).to(tl.int64)
    t_begin = tl.program_id(1) * tiles_per_prog
    t_end = tl.minimum(t_begin + tiles_per_prog, n_tiles)
    for t in range(t_begin, t_end):
        key = t * (BPT * SEG) + n
        key_ok = (n < BPT * SEG) & (key < n_keys)
        kt = tl.load(k_ptr + g.to(tl.int64) * sk_h + key[None, :].to(tl.int64) * sk_l + d[:, None] * sk_d,
                     mask=key_ok[None, :] & (d[:, None] < D), other=0.0)
        if CAST:
            kt = kt.to(tl.float32)
        s = tl.dot(q, kt, input_precision=PREC) * qk_scale           # [ROWS, TILE], log2 units
        vis = row_ok[:, None] & key_ok[None, :] & (key[None, :] <= causal_offset + i[:, None])
        s = tl.where(vis, s, -float("inf"))
        m = tl.max(s, axis=1)
        m_safe = tl.where(m == -float("inf"), 0.0, m)
        e = tl.where(vis, tl.math.exp2(s - m_safe[:, None]), 0.0)
        seg_sum = tl.sum(tl.reshape(e, [ROWS, BPT, TILE // BPT]), axis=2)  # [ROWS, BPT]
        seg = t * BPT + seg_local
        tl.store(s_ptr + row_base[:, None] * n_seg + seg[None, :], seg_sum,
                 mask=row_ok[:, None] & (seg[None, :] < n_seg))
        tl.store(m_ptr + row_base * n_tiles + t, m, mask=row_ok)


@triton.jit
def _row_lse_kernel(s_ptr, m_ptr, lse_ptr, n_seg, n_tiles, BPT: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, CHUNK)
    run_max = tl.full([CHUNK], -float("inf"), dtype=tl.float32)  # per-lane online log-sum-exp
    run_sum = tl.zeros([CHUNK], dtype=tl.float32)
    for c0 in range(0, n_seg, CHUNK):
        seg = c0 + c
        ok = seg < n_seg
        sv = tl.load(s_ptr + row * n_seg + seg, mask=ok, other=0.0)
        mv = tl.load(m_ptr + row * n_tiles + seg // BPT, mask=ok, other=-float("inf"))
        mv = tl.where(sv > 0, mv, -float("inf"))
        new_max = tl.maximum(run_max, mv)
        safe = tl.where(new_max == -float("inf"), 0.0, new_max)
        run_sum = run_sum * tl.math.exp2(run_max - safe) + tl.where(sv > 0, sv * tl.math.exp2(mv - safe), 0.0)
        run_max = new_max
    top = tl.max(run_max, axis=0)
    top_safe = tl.where(top == -float("inf"), 0.0, top)
    lanes = tl.where(run_max == -float("inf"), 0.0, run_sum * tl.math.exp2(run_max - top_safe))
    total = tl.sum(lanes, axis=0)
    lse = tl.where(total > 0, top_safe + tl.math.log2(tl.maximum(total, 1e-38)), -float("inf"))
    tl.store(lse_ptr + row, lse)


@triton.jit
def _reduce_heads_kernel(s_ptr, m_ptr, lse_ptr, out_ptr, n_heads, n_win, n_seg, n_tiles,
                         BPT: tl.constexpr, HB: tl.constexpr, CHUNK: tl.constexpr):
    i = tl.program_id(0)
    seg = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    seg_ok = seg < n_seg
    hb = tl.arange(0, HB)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for h0 in range(0, n_heads, HB):
        head = h0 + hb
        h_ok = head < n_heads
        row = (head * n_win + i).to(tl.int64)
        lse = tl.load(lse_ptr + row, mask=h_ok, other=-float("inf"))
        alive = lse > -float("inf")
        lse_safe = tl.where(alive, lse, 0.0)
        ok = h_ok[:, None] & seg_ok[None, :] & alive[:, None]
        sv = tl.load(s_ptr + row[:, None] * n_seg + seg[None, :], mask=ok, other=0.0)
        mv = tl.load(m_ptr + row[:, None] * n_tiles + seg[None, :] // BPT, mask=ok, other=0.0)
        p = tl.where(ok & (sv > 0), sv * tl.math.exp2(mv - lse_safe[:, None]), 0.0)
        acc += tl.sum(p, axis=0)
    # Each live head row sums to 1 and all heads share the causal mask, so /Hq is the row normalizer.
    tl.store(out_ptr + i * n_seg + seg, acc / n_heads, mask=seg_ok)


@triton.jit
def _token_kernel(q_ptr, k_ptr, lse_ptr, tok_ptr,
                  sq_h, sq_w, sq_d, sk_h, sk_l, sk_d,
                  n_win, n_keys, causal_offset, qk_scale,
                  GROUP: tl.constexpr, HP: tl.constexpr, WR: tl.constexpr, N_HC: tl.constexpr,
                  N_WC: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr,
                  D_PAD: tl.constexpr, TILE: tl.constexpr, CAST: tl.constexpr, PREC: tl.constexpr):
    """tok[g, j] = (1/GROUP) sum over this program's rows of p[row, j]; several programs add into one key."""
    g, head, i, row_ok = _window_rows(tl.program_id(0), n_win, GROUP, HP, WR, N_HC, N_WC, ROWS)
    d = tl.arange(0, D_PAD)
    q = tl.load(q_ptr + head[:, None] * sq_h + i[:, None] * sq_w + d[None, :] * sq_d,
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    if CAST:
        q = q.to(tl.float32)
    lse = tl.load(lse_ptr + head * n_win + i, mask=row_ok, other=-float("inf"))
    row_ok = row_ok & (lse > -float("inf"))
    lse = tl.where(row_ok, lse, 0.0)
    key = tl.program_id(1) * TILE + tl.arange(0, TILE)
    key_ok = key < n_keys
    kt = tl.load(k_ptr + g.to(tl.int64) * sk_h + key[None, :].to(tl.int64) * sk_l + d[:, None] * sk_d,
                 mask=key_ok[None, :] & (d[:, None] < D), other=0.0)
    if CAST:
        kt = kt.to(tl.float32)
    s = tl.dot(q, kt, input_precision=PREC) * qk_scale
    vis = row_ok[:, None] & key_ok[None, :] & (key[None, :] <= causal_offset + i[:, None])
    p = tl.where(vis, tl.math.exp2(tl.where(vis, s, 0.0) - lse[:, None]), 0.0)
    part = tl.sum(p, axis=0) / GROUP
    if N_HC * N_WC == 1:
        tl.store(tok_ptr + g.to(tl.int64) * n_keys + key, part, mask=key_ok)
    else:  # rows of one KV group are split over programs
        tl.atomic_add(tok_ptr + g.to(tl.int64) * n_keys + key, part, mask=key_ok)


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _segment(block_size: int, length: int) -> int:
    """Granularity of the partial sums: segments must tile every block boundary inside [0, L).

    The block itself when b <= 128; one block covering all keys (e.g. b = L for token scores) has no inner
    boundary, so any segment works; otherwise the largest divisor of b that is <= 128 (1 for a prime b: correct
    but stores [Hq, W, L] partials, so prefer block sizes with a large power-of-two factor).
    """
    if block_size <= 128:
        return block_size
    if block_size >= length:
        return 128
    return max(d for d in range(1, 129) if block_size % d == 0)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def window_block_scores_triton(queries: Tensor, keys: Tensor, block_size: int, causal_offset: int, scale: float,
                               token_scores: bool) -> tuple[Tensor, Tensor | None]:
    hq, w, d = queries.shape
    hkv, length, _ = keys.shape
    group = hq // hkv
    dev = queries.device
    # One input dtype for tl.dot: 16-bit stays 16-bit (tensor cores); anything else or a mix goes to fp32.
    if queries.dtype != keys.dtype or queries.dtype not in (torch.bfloat16, torch.float16):
        queries, keys = queries.float(), keys.float()
    n_blocks = -(-length // block_size)
    if w == 0 or length == 0:
        tok = torch.zeros(hkv, length, device=dev, dtype=torch.float32) if token_scores else None
        return torch.zeros(w, n_blocks, device=dev, dtype=torch.float32), tok
    # Every element below is written by a kernel: empty, not zeros (one memset launch less per call).
    seg = _segment(block_size, length)
    # Rows per program: at most 128 (register budget); more heads or window rows go to more programs.
    wr = min(_next_pow2(w), 128)
    hp = max(1, min(group, 128 // wr))
    n_hc, n_wc = -(-group // hp), -(-w // wr)
    rows = max(16, _next_pow2(hp * wr))
    if seg & (seg - 1) == 0:
        tile = max(seg, 64 if rows >= 128 else 128)
        bpt = tile // seg
    else:  # one masked segment per tile
        tile = max(16, _next_pow2(seg))
        bpt = 1
    n_seg = -(-length // seg)
    n_tiles = -(-n_seg // bpt)
    d_pad = max(16, _next_pow2(d))
    interp = _interpreting()
    cast = interp or queries.dtype == torch.float32
    prec = "ieee" if (interp or queries.dtype == torch.float32) else "tf32"
    qk_scale = scale * _LOG2E
    s_part = torch.empty(hq, w, n_seg, device=dev, dtype=torch.float32)
    m_part = torch.empty(hq, w, n_tiles, device=dev, dtype=torch.float32)
    # Enough programs to fill the GPU (~4 per SM on an H200) but each reuses its Q block over several tiles.
    progs_wanted = max(1, 528 // (hkv * n_hc * n_wc))
    tiles_per_prog = max(1, -(-n_tiles // progs_wanted))
    warps = 8 if rows * tile >= 8192 else 4
    common = dict(GROUP=group, HP=hp, WR=wr, N_HC=n_hc, N_WC=n_wc, ROWS=rows, D=d, D_PAD=d_pad, CAST=cast,
                  PREC=prec)
    _partial_kernel[(hkv * n_hc * n_wc, -(-n_tiles // tiles_per_prog))](
        queries, keys, s_part, m_part, *queries.stride(), *keys.stride(),
        w, length, n_seg, n_tiles, tiles_per_prog, causal_offset, qk_scale,
        TILE=tile, SEG=seg, BPT=bpt, num_warps=warps, **common)
    lse = torch.empty(hq, w, device=dev, dtype=torch.float32)
    _row_lse_kernel[(hq * w,)](s_part, m_part, lse, n_seg, n_tiles, BPT=bpt,
                               CHUNK=min(1024, max(16, _next_pow2(n_seg))))
    seg_dist = torch.empty(w, n_seg, device=dev, dtype=torch.float32)
    chunk = min(128, max(16, _next_pow2(n_seg)))
    hb = min(32, max(2, _next_pow2(hq)))
    _reduce_heads_kernel[(w, -(-n_seg // chunk))](s_part, m_part, lse, seg_dist, hq, w, n_seg, n_tiles,
                                                  BPT=bpt, HB=hb, CHUNK=chunk)
    dist = seg_dist
    if seg != block_size:  # blocks nest segments exactly: block mass = sum of its segments' mass
        if n_blocks == 1:
            dist = seg_dist.sum(-1, keepdim=True)
        else:
            per = block_size // seg
            padded = torch.nn.functional.pad(seg_dist, (0, n_blocks * per - n_seg))
            dist = padded.reshape(w, n_blocks, per).sum(-1)
    tok = None
    if token_scores:
        split = n_hc * n_wc > 1
        tok = (torch.zeros if split else torch.empty)(hkv, length, device=dev, dtype=torch.float32)
        tok_tile = 64 if rows >= 128 else 128
        _token_kernel[(hkv * n_hc * n_wc, -(-length // tok_tile))](
            queries, keys, lse, tok, *queries.stride(), *keys.stride(), w, length, causal_offset, qk_scale,
            TILE=tok_tile, num_warps=warps, **common)
    return dist, tok

