"""`scan`: `lax.scan` over time with the input projection hoisted out of the loop.

Per layer and direction:

    x_proj = x @ W_ih^T              one (T*B, I) x (I, G*H) GEMM for all steps
    for t (lax.scan):  gates = x_proj[t] + h @ W_hh^T + b  one (B, H) x (H, G*H) GEMM per step
                       h, c = cell(gates, c)              gate math, fused by XLA

LSTM: `b = b_ih + b_hh`.  GRU: `b = b_ih + [b_hr, b_hz, 0]`; `b_hn` stays with `W_hn h`
because the reset gate multiplies it.  `proj_size`: `h = (o * tanh(c)) @ W_hr^T`.  The
bias is added in the step, where it fuses with the add of the step's GEMM output, not
to the hoisted projection: that would be one more pass over a (T, B, G*H) array (52 MB
at S1).

Any other catalogue cell (`GENERIC_CELLS`: ln_lstm, peephole_lstm, gru_reset_before, a
user's own) runs `run_cell_direction`: its `project` hoisted over all T*B rows, then
`lax.scan` of its `step` from `jax_impl.cells`' table, with the same masking.

Options:
- `unroll` (int, default `DEFAULT_UNROLL` = 1): steps per loop iteration of
  `lax.scan`.  Unrolling could let XLA fuse across steps and cut the per-iteration
  overhead of the while loop (which dominates at small B*H, S3), but on jax 0.10.2's
  CPU backend it did not pay: S3 forward, measured interleaved in one process,
  unroll 1 / 2 / 8 took 357 / 366 / 395 ms (median) while compile time grows about
  linearly with unroll (1.5 s / 1.7 s / 3.6 s; 33 s at unroll 32).  Hence 1.
- `remat` (bool, default False): wrap the step in `jax.checkpoint`, so backward
  recomputes the gate activations instead of storing them (less memory, more compute).

Variable lengths: both directions run all T steps with a mask; a sequence's state is
frozen (and its output zero) at steps `t >= len`.  The reverse direction is a reversed
scan, so its state stays `h0` until `t = len - 1`: it runs over each sequence's valid
part, reversed, as PyTorch does -- no gather of the input needed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from . import cells
from .driver import LayerParams, layer_from_directions, valid_steps

DEFAULT_UNROLL = 1
OPTIONS = {"unroll": DEFAULT_UNROLL, "remat": False}
GENERIC_CELLS = True  # runs every cell of jax_impl.cells' table, a user's own included


def unavailable_reason() -> str | None:
    return None


def unsupported_reason(spec, *, lengths: bool, dtype: str) -> str | None:
    return None


def input_projection(cell: str, p: LayerParams, x: jax.Array) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """`x_proj = x W_ih^T` (T, B, G*H) for all steps in one GEMM, the step bias `b` and the GRU's `b_hn`."""
    T, B, I = x.shape
    x_proj = (x.reshape(T * B, I) @ p.w_ih.T).reshape(T, B, -1)
    if p.b_ih is None:
        return x_proj, None, None
    if cell == "lstm":
        return x_proj, p.b_ih + p.b_hh, None
    H = p.w_hh.shape[0] // 3
    return x_proj, jnp.concatenate([p.b_ih[:2 * H] + p.b_hh[:2 * H], p.b_ih[2 * H:]]), p.b_hh[2 * H:]


def _check_options(unroll, remat):
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"unroll must be an integer >= 1, got {unroll!r}")
    if not isinstance(remat, bool):
        raise ValueError(f"remat must be a bool, got {remat!r}")


def run_direction(cell, p: LayerParams, x, h0, c0, lengths, reverse: bool, *, unroll: int = DEFAULT_UNROLL,
                  remat: bool = False):
    """One direction over time-major x (T, B, I); see `driver.layer_from_directions`."""
    _check_options(unroll, remat)
    if cell not in ("lstm", "gru"):
        return run_cell_direction(cell, p, x, h0, c0, lengths, reverse, unroll=unroll, remat=remat)
    T = x.shape[0]
    x_proj, bias, b_hn = input_projection(cell, p, x)
    w_hr_t = None if p.w_hr is None else p.w_hr.T

    def step(carry, x_t):
        h, c = carry
        if bias is not None:
            x_t = x_t + bias
        if cell == "lstm":
            h_new, c_new = cells.lstm_cell(x_t + cells.recurrent(h, p.w_hh), c)
            if w_hr_t is not None:
                h_new = h_new @ w_hr_t
        else:
            H = h.shape[-1]
            gh = cells.recurrent(h, p.w_hh)
            n_h = gh[:, 2 * H:] if b_hn is None else gh[:, 2 * H:] + b_hn
            h_new = cells.gru_cell(x_t[:, :2 * H] + gh[:, :2 * H], x_t[:, 2 * H:], n_h, h)
            c_new = c
        return (h_new, c_new), h_new

    def masked_step(carry, inputs):
        x_t, valid = inputs  # valid: (B, 1), False past a sequence's length
        (h, c) = carry
        (h_new, c_new), _ = step(carry, x_t)
        h_new = jnp.where(valid, h_new, h)
        if cell == "lstm":
            c_new = jnp.where(valid, c_new, c)
        return (h_new, c_new), jnp.where(valid, h_new, jnp.zeros((), h_new.dtype))

    body, xs = (step, x_proj) if lengths is None else (masked_step, (x_proj, valid_steps(T, lengths)))
    if remat:
        body = jax.checkpoint(body)
    # The GRU has no c: carry a dummy scalar so one step signature serves both cells.
    carry0 = (h0, c0 if cell == "lstm" else jnp.zeros((), h0.dtype))
    (h_n, c_n), output = lax.scan(body, carry0, xs, reverse=reverse, unroll=min(unroll, T))
    return output, h_n, (c_n if cell == "lstm" else None)


def run_cell_direction(cell, p: LayerParams, x, h0, c0, lengths, reverse: bool, *, unroll: int, remat: bool):
    """One direction of a catalogue cell from `jax_impl.cells`' table (any cell but lstm/gru).

    `x_proj = cell.project(x, p)` for all T*B rows at once, then `lax.scan` of
    `cell.step(x_proj[t], state, p)`; with lengths a finished sequence keeps its state
    and outputs zero (the same masking as the lstm/gru path above).
    """
    if p.w_hr is not None:
        raise ValueError(f"cell {cell!r} does not support proj_size (only lstm does)")
    jax_cell = cells.get_jax_cell(cell)
    pd = {"weight_ih": p.w_ih, "weight_hh": p.w_hh, "bias_ih": p.b_ih, "bias_hh": p.b_hh, **(p.extras or {})}
    T, B, I = x.shape
    x_proj = jax_cell.project(x.reshape(T * B, I), pd).reshape(T, B, -1)

    def step(state, x_t):
        new = tuple(jax_cell.step(x_t, state, pd))
        return new, new[0]

    def masked_step(state, inputs):
        x_t, valid = inputs  # valid: (B, 1), False past a sequence's length
        new = tuple(jax_cell.step(x_t, state, pd))
        new = tuple(jnp.where(valid, n, o) for n, o in zip(new, state))
        return new, jnp.where(valid, new[0], jnp.zeros((), new[0].dtype))

    body, xs = (step, x_proj) if lengths is None else (masked_step, (x_proj, valid_steps(T, lengths)))
    if remat:
        body = jax.checkpoint(body)
    state0 = (h0,) if c0 is None else (h0, c0)
    state, output = lax.scan(body, state0, xs, reverse=reverse, unroll=min(unroll, T))
    return output, state[0], (state[1] if c0 is not None else None)


run_layer = layer_from_directions(run_direction)
