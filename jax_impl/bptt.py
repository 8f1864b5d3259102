"""`bptt`: `lax.scan` forward, hand-written backward (`jax.custom_vjp`) per layer and direction.

Why: differentiating `lax.scan` (the `scan` impl) makes JAX's backward scan accumulate
the weight gradients one step at a time (`dW_hh += dG_t^T h_{t-1}`, a skinny GEMM plus
an add per step).  Here, as in `torch_impl/autograd_fn.py`, the backward scan does only
what is inherently sequential -- the recurrent product `dG_t @ W_hh` and the gate
derivatives -- and emits the gate gradients `dG` (T, B, G*H); every weight gradient is
then ONE GEMM (or reduction) over all T*B rows:

    dW_ih = dX_g^T X    dW_hh = dG_h^T H_prev    db = sum_{t,b} dG    dx = dX_g W_ih
    (LSTM with proj_size:  dW_hr = dH_cand^T M,  M = o * tanh(c))

Forward (per step, time-major; `x_proj = x W_ih^T` hoisted and the bias `b` added in
the step, as in `scan.py`):

    LSTM  a = x_proj_t + h W_hh^T + b;  i,f,o = sigmoid(a_i,a_f,a_o);  g = tanh(a_g)
          c' = f c + i g;  m = o tanh(c');  h' = m (or m W_hr^T with proj_size)
    GRU   r,z = sigmoid(x_proj_{r,z} + b_{r,z} + (h W_hh^T)_{r,z});  n_h = (h W_hh^T)_n + b_hn
          n = tanh(x_proj_n + b_in + r n_h);  h' = (1 - z) n + z h

Backward (per step, reversed scan order; `dh`, `dc` flow from the future):

    LSTM  dh' = v (dh + dout_t)                 (v: step valid, t < len)
          dm = dh' (W_hr with proj_size);  dc' = v dc + dm o (1 - tanh^2 c')
          da = [dc' g i(1-i), dc' c f(1-f), dc' i (1-g^2), dm tanh(c') o(1-o)]
          dh <- (1 - v) dh + da W_hh;  dc <- (1 - v) dc + dc' f
    GRU   dh' = v (dh + dout_t);  dn = dh'(1-z)(1-n^2);  dz = dh'(h - n) z(1-z)
          dr = dn n_h r(1-r);  dX_g = [dr, dz, dn];  dG_h = [dr, dz, dn r]
          dh <- (1 - v) dh + dh' z + dG_h W_hh

With lengths the forward keeps a finished sequence's state and outputs zero (`scan`'s
masking: the reverse direction is a reversed scan, so it starts at each sequence's last
valid step); the backward applies the same mask `v`, which zeroes the gate gradients of
padded steps.  Residuals saved by the forward: the gate activations, the h (and c)
sequences and, for the GRU, `n_h`.

The catalogue cells `ln_lstm`, `peephole_lstm` and `gru_reset_before` have their own
custom_vjp directions in `bptt_cells.py` (equations there), dispatched from `run_direction`;
a user's own cell has no hand-written backward and runs on `scan`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from .cells import lstm_gate_scales, recurrent
from .driver import LayerParams, layer_from_directions, valid_steps
from .scan import input_projection

OPTIONS: dict = {}
# Lets the driver hand catalogue cells to this impl; `unsupported_reason` then refuses the
# cells without a hand-written backward here (a user's own cell).
GENERIC_CELLS = True


def unavailable_reason() -> str | None:
    return None


def hand_written_cells() -> tuple[str, ...]:
    """The cells with a hand-written backward here: lstm, gru and `bptt_cells.DIRECTIONS`."""
    from . import bptt_cells  # imports this module's helpers: import on use, not at the top
    return ("lstm", "gru") + tuple(bptt_cells.DIRECTIONS)


def unsupported_reason(spec, *, lengths: bool, dtype: str) -> str | None:
    cells = hand_written_cells()
    if spec.cell not in cells:
        return (f"jax.bptt has hand-written backward passes for {', '.join(cells)} only, not {spec.cell!r}; "
                "jax.scan runs any registered cell (JAX autodiff)")
    return None


def _project(x: jax.Array, w: jax.Array) -> jax.Array:
    """x W^T for all T*B rows in one GEMM, (T, B, G*H) (biases are added in the step)."""
    T, B, I = x.shape
    return (x.reshape(T * B, I) @ w.T).reshape(T, B, -1)


def _add(a, b):
    """a + b where b may be None (an absent bias)."""
    return a if b is None else a + b


def _weight_grad(dg: jax.Array, inp: jax.Array) -> jax.Array:
    """sum over t, b of dg[t, b, :, None] * inp[t, b, None, :]: (G*H, K), one GEMM over all T*B rows.

    Computed as (inp^T dg)^T with the transpose kept out of the GEMM by an optimization
    barrier: XLA would otherwise fold it in and run the slower dg^T inp form.
    """
    inp2, dg2 = inp.reshape(-1, inp.shape[-1]), dg.reshape(-1, dg.shape[-1])
    return lax.optimization_barrier(inp2.T @ dg2).T


def _sum_rows(a: jax.Array) -> jax.Array:
    """Sum over all leading axes, as a GEMV with a ones vector (XLA's CPU reduction over
    (T, B) is several times slower)."""
    a2 = a.reshape(-1, a.shape[-1])
    return jnp.ones((a2.shape[0],), a.dtype) @ a2


def _valid_only(v, a):
    """a on valid steps, 0 on padded ones (v None: no lengths)."""
    return a if v is None else jnp.where(v, a, 0)


def _mask_carry(v, new, old):
    """The carry after a step: `new` where valid; on a padded step `new` is 0 and `old` passes."""
    return new if v is None else new + jnp.where(v, 0, old)


def _masked_outputs(v, new_state, old_state, saved):
    """A forward step's (carry, scanned outputs) for state tuples (h, ...).

    Scanned: (output, saved, the state sequence).  Without lengths the output is h' and is
    emitted once (it is also the h sequence the backward needs); with lengths a padded
    step keeps the old state and outputs zero, and the h sequence is emitted apart.
    """
    if v is None:
        return new_state, (new_state[0], saved, new_state[1:])
    new_state = tuple(jnp.where(v, n, o) for n, o in zip(new_state, old_state))
    out = jnp.where(v, new_state[0], jnp.zeros((), new_state[0].dtype))
    return new_state, (out, saved, new_state)


def _scan_outputs(ys, valid):
    """(output, saved, state sequences (h, ...)) from `_masked_outputs`' scanned tuples."""
    output, saved, states = ys
    return output, saved, ((output,) + states if valid is None else states)


def _previous(seq: jax.Array, h0: jax.Array, reverse: bool) -> jax.Array:
    """The state each step started from: h_{t-1} (forward) or h_{t+1} (reverse), h0 at the start."""
    if reverse:
        return jnp.concatenate([seq[1:], h0[None]], axis=0)
    return jnp.concatenate([h0[None], seq[:-1]], axis=0)


# ---------------------------------------------------------------------------------
# LSTM


def _lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, valid):
    x_proj, bias, _ = input_projection("lstm", LayerParams(w_ih, w_hh, b_ih, b_hh, w_hr), x)
    w_hr_t = None if w_hr is None else w_hr.T
    s, b = lstm_gate_scales(c0.shape[-1], x.dtype)

    def step(carry, inputs):
        h, c = carry
        xp_t, v = inputs
        i, f, g, o = jnp.split(jnp.tanh(_add(xp_t + recurrent(h, w_hh), bias) * s) * s + b, 4, axis=-1)
        c_new = f * c + i * g
        h_new = o * jnp.tanh(c_new)
        if w_hr_t is not None:
            h_new = h_new @ w_hr_t
        # gates saved one array each: the backward's fusions then read plain (T, B, H) buffers
        return _masked_outputs(v, (h_new, c_new), (h, c), (i, f, g, o))

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x_proj, valid), reverse=reverse)
    output, acts, (h_seq, c_seq) = _scan_outputs(ys, valid)
    return (output, h_n, c_n), (acts, h_seq, c_seq)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def lstm_direction(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, valid):
    """One LSTM direction over time-major x (T, B, I) -> (output, h_n, c_n); see the module docstring.

    `b_ih`/`b_hh`/`w_hr`/`valid` may be None (no bias / no projection / no lengths).
    """
    return _lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, valid)[0]


def _lstm_fwd(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, valid):
    out, (acts, h_seq, c_seq) = _lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, valid)
    return out, (x, h0, c0, w_ih, w_hh, b_ih is not None, w_hr, valid, acts, h_seq, c_seq)


def _lstm_bwd(reverse, res, cot):
    x, h0, c0, w_ih, w_hh, has_bias, w_hr, valid, acts, h_seq, c_seq = res
    d_out, d_hn, d_cn = cot
    c_prev = _previous(c_seq, c0, reverse)

    def step(carry, inputs):
        dh, dc = carry
        dout_t, (i, f, g, o), c_old, c_new, v = inputs
        dh_cand = _valid_only(v, dh + dout_t)  # padded step: no gradient into its candidate state
        dm = dh_cand if w_hr is None else dh_cand @ w_hr
        tanh_c = jnp.tanh(c_new)
        dcc = _valid_only(v, dc) + dm * o * (1 - tanh_c * tanh_c)
        da = jnp.concatenate([dcc * g * i * (1 - i), dcc * c_old * f * (1 - f), dcc * i * (1 - g * g),
                              dm * tanh_c * o * (1 - o)], axis=-1)
        dh_prev = _mask_carry(v, da @ w_hh, dh)
        dc_prev = _mask_carry(v, dcc * f, dc)
        return (dh_prev, dc_prev), (da, None if w_hr is None else dh_cand)

    (dh0, dc0), (da, dh_cand) = lax.scan(step, (d_hn, d_cn), (d_out, acts, c_prev, c_seq, valid),
                                         reverse=not reverse)
    d_w_ih = _weight_grad(da, x)
    d_w_hh = _weight_grad(da, _previous(h_seq, h0, reverse))
    dx = da @ w_ih
    db = _sum_rows(da) if has_bias else None
    d_w_hr = None
    if w_hr is not None:
        # m = o tanh(c) of each step (padded steps have dh_cand = 0, so their m does not matter)
        d_w_hr = _weight_grad(dh_cand, acts[3] * jnp.tanh(c_seq))
    return dx, dh0, dc0, d_w_ih, d_w_hh, db, db, d_w_hr, None


lstm_direction.defvjp(_lstm_fwd, _lstm_bwd)


# ---------------------------------------------------------------------------------
# GRU


def _gru_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    H = h0.shape[-1]
    x_proj, b_x, b_hn = input_projection("gru", LayerParams(w_ih, w_hh, b_ih, b_hh, None), x)

    def step(carry, inputs):
        (h,) = carry
        xp_t, v = inputs
        xp_t = _add(xp_t, b_x)
        gh = recurrent(h, w_hh)
        n_h = _add(gh[:, 2 * H:], b_hn)
        r, z = jnp.split(jax.nn.sigmoid(xp_t[:, :2 * H] + gh[:, :2 * H]), 2, axis=-1)
        n = jnp.tanh(xp_t[:, 2 * H:] + r * n_h)
        h_new = (1 - z) * n + z * h
        return _masked_outputs(v, (h_new,), (h,), ((r, z, n), n_h))

    (h_n,), ys = lax.scan(step, (h0,), (x_proj, valid), reverse=reverse)
    output, (acts, n_h), (h_seq,) = _scan_outputs(ys, valid)
    return (output, h_n), (acts, n_h, h_seq)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def gru_direction(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    """One GRU direction over time-major x (T, B, I) -> (output, h_n); see the module docstring."""
    return _gru_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid)[0]


def _gru_fwd(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    out, (acts, n_h, h_seq) = _gru_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid)
    return out, (x, h0, w_ih, w_hh, b_ih is not None, valid, acts, n_h, h_seq)


def _gru_bwd(reverse, res, cot):
    x, h0, w_ih, w_hh, has_bias, valid, acts, n_h, h_seq = res
    d_out, d_hn = cot
    h_prev = _previous(h_seq, h0, reverse)

    def step(dh, inputs):
        dout_t, (r, z, n), nh_t, h_old, v = inputs
        dh_cand = _valid_only(v, dh + dout_t)
        dn = dh_cand * (1 - z) * (1 - n * n)
        dz = dh_cand * (h_old - n) * z * (1 - z)
        dr = dn * nh_t * r * (1 - r)
        dn_h = dn * r  # gradient of W_hn h + b_hn
        dh_prev = _mask_carry(v, jnp.concatenate([dr, dz, dn_h], axis=-1) @ w_hh + dh_cand * z, dh)
        return dh_prev, (jnp.concatenate([dr, dz, dn], axis=-1), dn_h)

    dh0, (dx_g, dn_h) = lax.scan(step, d_hn, (d_out, acts, n_h, h_prev, valid), reverse=not reverse)
    H = h0.shape[-1]
    dg_h = jnp.concatenate([dx_g[..., :2 * H], dn_h], axis=-1)
    d_w_ih = _weight_grad(dx_g, x)
    d_w_hh = _weight_grad(dg_h, h_prev)
    dx = dx_g @ w_ih
    d_b_ih = _sum_rows(dx_g) if has_bias else None
    d_b_hh = _sum_rows(dg_h) if has_bias else None
    return dx, dh0, d_w_ih, d_w_hh, d_b_ih, d_b_hh, None


gru_direction.defvjp(_gru_fwd, _gru_bwd)


# ---------------------------------------------------------------------------------
# the impl interface


def run_direction(cell, p: LayerParams, x, h0, c0, lengths, reverse: bool):
    """One direction over time-major x (T, B, I); see `driver.layer_from_directions`."""
    valid = None if lengths is None else valid_steps(x.shape[0], lengths)
    if cell == "lstm":
        return lstm_direction(reverse, x, h0, c0, p.w_ih, p.w_hh, p.b_ih, p.b_hh, p.w_hr, valid)
    if cell == "gru":
        output, h_n = gru_direction(reverse, x, h0, p.w_ih, p.w_hh, p.b_ih, p.b_hh, valid)
        return output, h_n, None
    from . import bptt_cells
    if cell in bptt_cells.DIRECTIONS:
        if p.w_hr is not None:
            raise ValueError(f"cell {cell!r} does not support proj_size (only lstm does)")
        return bptt_cells.DIRECTIONS[cell](p, x, h0, c0, valid, reverse)
    raise ValueError(f"jax.bptt runs {', '.join(hand_written_cells())} only, not {cell!r}")


run_layer = layer_from_directions(run_direction)
