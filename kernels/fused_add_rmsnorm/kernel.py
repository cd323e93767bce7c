"""The fused residual-add + RMSNorm kernel in Triton (its sha256 is the family's source digest).

One program normalizes ``ROWS`` rows.  With ``BLOCK_N >= N`` the rows stay in registers
between the add and the write; with a ``TAIL`` the row stays in registers too, as a head
of ``BLOCK_N`` columns and a tail of ``TAIL`` columns (a row that is not a power of two
long pads only its tail: 4352 is 4096 + 256, not 8192); otherwise each row is walked
twice in ``BLOCK_N`` chunks: the first pass adds, stores the residual and accumulates
the sum of squares, the second reads the residual back (from L2) and writes ``y``.  Only
a step that can run past the row (or past the rows) is masked: the chunks before the
last one of a row never are.

``HINTS`` (1) adds cache hints: what is read once (x, and the residual where it is not
read again) is evicted first, the weight, read by every program, last; ``y`` is stored
streaming, and a chunked row's stored residual, which its second pass reads back, is
kept (evict last).  ``W_EARLY`` (1) issues the weight's load before the reduction, beside
x and the residual, instead of after it.  Neither changes what is computed.  ``M`` is not
specialised, so one compiled variant serves every row count.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _ld(ptrs, mask, MASKED: tl.constexpr, POLICY: tl.constexpr):
    """Load (masked where ``MASKED``, zeros outside); ``POLICY`` 1: evict first, 2: evict last."""
    if MASKED:
        if POLICY == 1:
            v = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
        elif POLICY == 2:
            v = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_last")
        else:
            v = tl.load(ptrs, mask=mask, other=0.0)
    else:
        if POLICY == 1:
            v = tl.load(ptrs, eviction_policy="evict_first")
        elif POLICY == 2:
            v = tl.load(ptrs, eviction_policy="evict_last")
        else:
            v = tl.load(ptrs)
    return v


@triton.jit
def _st(ptrs, value, mask, MASKED: tl.constexpr, POLICY: tl.constexpr):
    """Store (masked where ``MASKED``); ``POLICY`` 1: streaming (``.cs``), 2: evict last."""
    if MASKED:
        if POLICY == 1:
            tl.store(ptrs, value, mask=mask, cache_modifier=".cs")
        elif POLICY == 2:
            tl.store(ptrs, value, mask=mask, eviction_policy="evict_last")
        else:
            tl.store(ptrs, value, mask=mask)
    else:
        if POLICY == 1:
            tl.store(ptrs, value, cache_modifier=".cs")
        elif POLICY == 2:
            tl.store(ptrs, value, eviction_policy="evict_last")
        else:
            tl.store(ptrs, value)


@triton.jit
def _add(x_rows, r_rows, cols, mask, MASKED: tl.constexpr, HINTS: tl.constexpr, KEEP: tl.constexpr):
    """x + residual over ``cols``, rounded to the residual's dtype and stored into it
    (kept in L2 where ``KEEP`` and ``HINTS``); returns the sum in fp32."""
    x = _ld(x_rows + cols[None, :], mask, MASKED, HINTS)
    r = _ld(r_rows + cols[None, :], mask, MASKED, HINTS * (1 - KEEP))
    s = (x.to(tl.float32) + r.to(tl.float32)).to(r_rows.dtype.element_ty)
    _st(r_rows + cols[None, :], s, mask, MASKED, HINTS * 2 * KEEP)
    return s.to(tl.float32)


@triton.jit(do_not_specialize=["M", "eps"])
def fused_add_rmsnorm_kernel(
    X, R, W, Y, M, stride_x, stride_r, stride_y, eps,
    N: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STAGES: tl.constexpr,
    TAIL: tl.constexpr = 0, HINTS: tl.constexpr = 0, W_EARLY: tl.constexpr = 0,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows64 = rows.to(tl.int64)
    x_rows = X + rows64[:, None] * stride_x
    r_rows = R + rows64[:, None] * stride_r
    y_rows = Y + rows64[:, None] * stride_y
    # One row per program never runs past the rows (the grid is M programs).
    ROW_MASKED: tl.constexpr = ROWS > 1
    if BLOCK_N >= N:
        COL_MASKED: tl.constexpr = BLOCK_N > N
        cols = tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols < N)[None, :]
        if W_EARLY:
            w = _ld(W + cols, cols < N, COL_MASKED, HINTS * 2).to(tl.float32)
        sf = _add(x_rows, r_rows, cols, mask, ROW_MASKED or COL_MASKED, HINTS, 0)
        rstd = tl.rsqrt(tl.sum(sf * sf, axis=1) / N + eps)
        if not W_EARLY:
            w = _ld(W + cols, cols < N, COL_MASKED, HINTS * 2).to(tl.float32)
        y = sf * rstd[:, None] * w[None, :]
        _st(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask, ROW_MASKED or COL_MASKED, HINTS)
    elif TAIL > 0:
        # The row in registers as a head of BLOCK_N columns (never masked by column)
        # and a tail of TAIL columns from BLOCK_N on (masked past the row).
        TAIL_MASKED: tl.constexpr = BLOCK_N + TAIL > N
        head = tl.arange(0, BLOCK_N)
        tail = BLOCK_N + tl.arange(0, TAIL)
        head_mask = row_ok[:, None] & (head < N)[None, :]
        tail_mask = row_ok[:, None] & (tail < N)[None, :]
        if W_EARLY:
            wh = _ld(W + head, head < N, False, HINTS * 2).to(tl.float32)
            wt = _ld(W + tail, tail < N, TAIL_MASKED, HINTS * 2).to(tl.float32)
        sh = _add(x_rows, r_rows, head, head_mask, ROW_MASKED, HINTS, 0)
        st = _add(x_rows, r_rows, tail, tail_mask, ROW_MASKED or TAIL_MASKED, HINTS, 0)
        rstd = tl.rsqrt((tl.sum(sh * sh, axis=1) + tl.sum(st * st, axis=1)) / N + eps)
        if not W_EARLY:
            wh = _ld(W + head, head < N, False, HINTS * 2).to(tl.float32)
            wt = _ld(W + tail, tail < N, TAIL_MASKED, HINTS * 2).to(tl.float32)
        yh = sh * rstd[:, None] * wh[None, :]
        yt = st * rstd[:, None] * wt[None, :]
        _st(y_rows + head[None, :], yh.to(Y.dtype.element_ty), head_mask, ROW_MASKED, HINTS)
        _st(y_rows + tail[None, :], yt.to(Y.dtype.element_ty), tail_mask, ROW_MASKED or TAIL_MASKED, HINTS)
    else:
        # Full chunks unmasked by column, then the row's last, partial chunk (if any) masked.
        FULL: tl.constexpr = N // BLOCK_N * BLOCK_N
        acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        for start in tl.range(0, FULL, BLOCK_N, num_stages=STAGES):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_ok[:, None] & (cols < N)[None, :]
            sf = _add(x_rows, r_rows, cols, mask, ROW_MASKED, HINTS, 1)
            acc += sf * sf
        if FULL < N:
            cols = FULL + tl.arange(0, BLOCK_N)
            mask = row_ok[:, None] & (cols < N)[None, :]
            sf = _add(x_rows, r_rows, cols, mask, True, HINTS, 1)
            acc += sf * sf
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + eps)
        for start in tl.range(0, FULL, BLOCK_N, num_stages=STAGES):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_ok[:, None] & (cols < N)[None, :]
            if W_EARLY:
                w = _ld(W + cols, cols < N, False, HINTS * 2).to(tl.float32)
            s = _ld(r_rows + cols[None, :], mask, ROW_MASKED, HINTS).to(tl.float32)
            if not W_EARLY:
                w = _ld(W + cols, cols < N, False, HINTS * 2).to(tl.float32)
            y = s * rstd[:, None] * w[None, :]
            _st(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask, ROW_MASKED, HINTS)
        if FULL < N:
            cols = FULL + tl.arange(0, BLOCK_N)
            mask = row_ok[:, None] & (cols < N)[None, :]
            s = _ld(r_rows + cols[None, :], mask, True, HINTS).to(tl.float32)
            w = _ld(W + cols, cols < N, True, HINTS * 2).to(tl.float32)
            y = s * rstd[:, None] * w[None, :]
            _st(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask, True, HINTS)
