"""`naive`: the textbook loop in JAX -- a Python loop over time, one dense of [x, h] per step.

Each step concatenates `[x_t, h]` and applies one fused dense (a single `gate_fc`);
nothing is hoisted, so a trace has T copies of the step (slow to compile for long T,
slow to run eagerly).  It is the bottom rung of the ladder and a readable check of the
others; it keeps its own loop (the Python loop is what it shows), with the masking of
`cells.advance`.  Correctness details such a loop often misses and this keeps: PyTorch's two
biases are summed, the GRU reset gate scales only the recurrent part of `n` (so the
GRU's one dense uses a block weight `[[W_ir W_hr], [W_iz W_hz], [W_in 0], [0 W_hn]]`
that keeps `W_in x` and `W_hn h` apart), variable lengths freeze the state past each
length and zero the output there, and `proj_size` projects `h` by `W_hr`.
"""

from __future__ import annotations

import jax.numpy as jnp

from rnnbench.core.capabilities import Capabilities

from rnnbench.core.params import LayerParams

from .. import cells

OPTIONS: dict = {}


def _summed_biases(p: LayerParams):
    G4 = p.w_ih.shape[0]
    zero_b = jnp.zeros((G4,), p.w_ih.dtype)
    return (zero_b if p.b_ih is None else p.b_ih), (zero_b if p.b_hh is None else p.b_hh)


def lstm_dense(p: LayerParams):
    """(W, b) of the LSTM's one dense applied to [x, h]: W is (4H, I + H_out)."""
    b_ih, b_hh = _summed_biases(p)
    return jnp.concatenate([p.w_ih, p.w_hh], axis=1), b_ih + b_hh


def gru_dense(p: LayerParams):
    """(W, b) of the GRU's one dense applied to [x, h]: W is (4H, I + H), rows r, z, n_x, n_h."""
    b_ih, b_hh = _summed_biases(p)
    G3, I = p.w_ih.shape
    H = G3 // 3
    H_in = p.w_hh.shape[1]
    w_rz = jnp.concatenate([p.w_ih[:2 * H], p.w_hh[:2 * H]], axis=1)
    w_nx = jnp.concatenate([p.w_ih[2 * H:], jnp.zeros((H, H_in), p.w_ih.dtype)], axis=1)
    w_nh = jnp.concatenate([jnp.zeros((H, I), p.w_ih.dtype), p.w_hh[2 * H:]], axis=1)
    b = jnp.concatenate([b_ih[:2 * H] + b_hh[:2 * H], b_ih[2 * H:], b_hh[2 * H:]])
    return jnp.concatenate([w_rz, w_nx, w_nh]), b


def lstm_update(gates, state: tuple, p: LayerParams) -> tuple:
    h_new, c_new = cells.lstm_cell(gates, state[1])
    if p.w_hr is not None:
        h_new = h_new @ p.w_hr.T
    return h_new, c_new


def gru_update(gates, state: tuple, p: LayerParams) -> tuple:
    (h,) = state
    H = h.shape[-1]
    return (cells.gru_cell(gates[:, :2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:], h),)


# cell -> (dense(p) -> (W, b), update(gates, state, p) -> new state)
KERNELS = {"lstm": (lstm_dense, lstm_update), "gru": (gru_dense, gru_update)}

CAPABILITIES = Capabilities(cells=tuple(KERNELS), proj_size=True)


def run_direction(cell: cells.JaxCell, p: LayerParams, x, state: tuple, lengths, *, reverse: bool):
    """One direction over time-major x (T, B, I); see `rnnbench.jax.stack`."""
    dense, update = KERNELS[cell.name]
    w, b = dense(p)
    T = x.shape[0]
    outputs = [None] * T
    # The reverse direction walks t = T-1 .. 0; with lengths the state stays h0 until
    # t = len-1, so each sequence's valid part is what runs reversed (PyTorch's semantics).
    for t in (reversed(range(T)) if reverse else range(T)):
        gates = jnp.concatenate([x[t], state[0]], axis=-1) @ w.T + b
        valid = None if lengths is None else (t < lengths)[:, None]
        state, outputs[t] = cells.advance(valid, update(gates, state, p), state)
    return jnp.stack(outputs), state
