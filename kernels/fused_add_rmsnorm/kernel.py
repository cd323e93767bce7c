"""The fused residual-add + RMSNorm kernel in Triton (its sha256 is the family's source digest).

One program normalizes ``ROWS`` rows.  With ``BLOCK_N >= N`` the rows stay in registers
between the add and the write; otherwise each row is walked twice in ``BLOCK_N`` chunks:
the first pass adds, stores the residual and accumulates the sum of squares, the second
reads the residual back (from L2) and writes ``y``.  ``M`` is not specialised, so one
compiled variant serves every row count.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M", "eps"])
def fused_add_rmsnorm_kernel(
    X, R, W, Y, M, stride_x, stride_r, stride_y, eps,
    N: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STAGES: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows64 = rows.to(tl.int64)
    x_rows = X + rows64[:, None] * stride_x
    r_rows = R + rows64[:, None] * stride_r
    y_rows = Y + rows64[:, None] * stride_y
    if BLOCK_N >= N:
        cols = tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols < N)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0)
        r = tl.load(r_rows + cols[None, :], mask=mask, other=0.0)
        s = (x.to(tl.float32) + r.to(tl.float32)).to(R.dtype.element_ty)
        tl.store(r_rows + cols[None, :], s, mask=mask)
        sf = s.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(sf * sf, axis=1) / N + eps)
        w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = sf * rstd[:, None] * w[None, :]
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        for start in tl.range(0, N, BLOCK_N, num_stages=STAGES):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_ok[:, None] & (cols < N)[None, :]
            x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0)
            r = tl.load(r_rows + cols[None, :], mask=mask, other=0.0)
            s = (x.to(tl.float32) + r.to(tl.float32)).to(R.dtype.element_ty)
            tl.store(r_rows + cols[None, :], s, mask=mask)
            sf = s.to(tl.float32)
            acc += sf * sf
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + eps)
        for start in tl.range(0, N, BLOCK_N, num_stages=STAGES):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_ok[:, None] & (cols < N)[None, :]
            s = tl.load(r_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
            y = s * rstd[:, None] * w[None, :]
            tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
