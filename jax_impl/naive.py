"""`naive`: the seeds' way in JAX -- a Python loop over time, one dense of [x, h] per step.

Each step concatenates `[x_t, h]` and applies one fused dense (the seeds' `gate_fc`);
nothing is hoisted, so a trace has T copies of the step (slow to compile for long T,
slow to run eagerly).  It is the bottom rung of the ladder and a readable check of the
others.  Correctness details the seeds miss and this keeps: PyTorch's two biases are
summed, the GRU reset gate scales only the recurrent part of `n` (so the GRU's one
dense uses a block weight `[[W_ir W_hr], [W_iz W_hz], [W_in 0], [0 W_hn]]` that keeps
`W_in x` and `W_hn h` apart), variable lengths freeze the state past each length and
zero the output there, and `proj_size` projects `h` by `W_hr`.
"""

from __future__ import annotations

import jax.numpy as jnp

from . import cells
from .driver import LayerParams, layer_from_directions

OPTIONS: dict = {}


def unavailable_reason() -> str | None:
    return None


def unsupported_reason(spec, *, lengths: bool, dtype: str) -> str | None:
    return None


def _fused_dense(cell: str, p: LayerParams):
    """(W, b) of the one dense applied to [x, h]: W is (rows, I + H_out)."""
    G4, I = p.w_ih.shape
    zero_b = jnp.zeros((G4,), p.w_ih.dtype)
    b_ih = zero_b if p.b_ih is None else p.b_ih
    b_hh = zero_b if p.b_hh is None else p.b_hh
    if cell == "lstm":
        return jnp.concatenate([p.w_ih, p.w_hh], axis=1), b_ih + b_hh
    H = G4 // 3
    H_in = p.w_hh.shape[1]
    w_rz = jnp.concatenate([p.w_ih[:2 * H], p.w_hh[:2 * H]], axis=1)
    w_nx = jnp.concatenate([p.w_ih[2 * H:], jnp.zeros((H, H_in), p.w_ih.dtype)], axis=1)
    w_nh = jnp.concatenate([jnp.zeros((H, I), p.w_ih.dtype), p.w_hh[2 * H:]], axis=1)
    b = jnp.concatenate([b_ih[:2 * H] + b_hh[:2 * H], b_ih[2 * H:], b_hh[2 * H:]])
    return jnp.concatenate([w_rz, w_nx, w_nh]), b


def run_direction(cell, p: LayerParams, x, h0, c0, lengths, reverse: bool):
    """One direction over time-major x (T, B, I); see `driver.layer_from_directions`."""
    w, b = _fused_dense(cell, p)
    h, c = h0, c0
    T = x.shape[0]
    outputs = [None] * T
    # The reverse direction walks t = T-1 .. 0; with lengths the state stays h0 until
    # t = len-1, so each sequence's valid part is what runs reversed (PyTorch's semantics).
    for t in (reversed(range(T)) if reverse else range(T)):
        gates = jnp.concatenate([x[t], h], axis=-1) @ w.T + b
        if cell == "lstm":
            h_new, c_new = cells.lstm_cell(gates, c)
            if p.w_hr is not None:
                h_new = h_new @ p.w_hr.T
        else:
            H = h.shape[-1]
            h_new = cells.gru_cell(gates[:, :2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:], h)
            c_new = None
        if lengths is not None:  # past its length a sequence keeps its state and outputs zeros
            valid = (t < lengths)[:, None]
            h_new = jnp.where(valid, h_new, h)
            c_new = None if c_new is None else jnp.where(valid, c_new, c)
            outputs[t] = jnp.where(valid, h_new, 0.0)
        else:
            outputs[t] = h_new
        h, c = h_new, c_new
    return jnp.stack(outputs), h, c


run_layer = layer_from_directions(run_direction)
