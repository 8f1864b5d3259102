"""The hand-written backward of the plain LSTM and GRU (`jax.custom_vjp`), one direction each.

The forward is the catalogue's equations as `rnnbench.jax.cells` computes them (`x_proj =
x W_ih^T` hoisted, the step bias added in the step, the LSTM's gates from one tanh pass),
in a `lax.scan` that saves what the backward needs: the gate activations, the h (and c)
sequences and, for the GRU, `n_h = W_hn h + b_hn`.  The backward scan does only what is
inherently sequential -- the recurrent product `dG_t @ W_hh` and the gate derivatives --
and emits the gate gradients `dG` (T, B, G*H); every weight gradient is then ONE GEMM
(or reduction) over all T*B rows:

    dW_ih = dX_g^T X    dW_hh = dG_h^T H_prev    db = sum_{t,b} dG    dx = dX_g W_ih
    (LSTM with proj_size:  dW_hr = dH_cand^T M,  M = o * tanh(c))

Backward (per step, reversed scan order; `dh`, `dc` flow from the future; the catalogue's
notation, `m = o tanh(c')` the LSTM's output before the projection):

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
padded steps.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ...cells import gru_step_biases, lstm_gate_scales, lstm_step_bias, recurrent
from .common import (
    add, mask_carry, masked_outputs, previous, project, scan_outputs, sum_rows, valid_only, weight_grad)

__all__ = ["lstm_direction", "gru_direction", "gru", "lstm"]


# ---------------------------------------------------------------------------------
# LSTM


def _lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, valid):
    x_proj, bias = project(x, w_ih), lstm_step_bias(b_ih, b_hh)
    w_hr_t = None if w_hr is None else w_hr.T
    s, b = lstm_gate_scales(c0.shape[-1], x.dtype)

    def step(carry, inputs):
        h, c = carry
        xp_t, v = inputs
        i, f, g, o = jnp.split(jnp.tanh(add(xp_t + recurrent(h, w_hh), bias) * s) * s + b, 4, axis=-1)
        c_new = f * c + i * g
        h_new = o * jnp.tanh(c_new)
        if w_hr_t is not None:
            h_new = h_new @ w_hr_t
        # gates saved one array each: the backward's fusions then read plain (T, B, H) buffers
        return masked_outputs(v, (h_new, c_new), (h, c), (i, f, g, o))

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x_proj, valid), reverse=reverse)
    output, acts, (h_seq, c_seq) = scan_outputs(ys, valid)
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
    c_prev = previous(c_seq, c0, reverse)

    def step(carry, inputs):
        dh, dc = carry
        dout_t, (i, f, g, o), c_old, c_new, v = inputs
        dh_cand = valid_only(v, dh + dout_t)  # padded step: no gradient into its candidate state
        dm = dh_cand if w_hr is None else dh_cand @ w_hr
        tanh_c = jnp.tanh(c_new)
        dcc = valid_only(v, dc) + dm * o * (1 - tanh_c * tanh_c)
        da = jnp.concatenate([dcc * g * i * (1 - i), dcc * c_old * f * (1 - f), dcc * i * (1 - g * g),
                              dm * tanh_c * o * (1 - o)], axis=-1)
        dh_prev = mask_carry(v, da @ w_hh, dh)
        dc_prev = mask_carry(v, dcc * f, dc)
        return (dh_prev, dc_prev), (da, None if w_hr is None else dh_cand)

    (dh0, dc0), (da, dh_cand) = lax.scan(step, (d_hn, d_cn), (d_out, acts, c_prev, c_seq, valid),
                                         reverse=not reverse)
    d_w_ih = weight_grad(da, x)
    d_w_hh = weight_grad(da, previous(h_seq, h0, reverse))
    dx = da @ w_ih
    db = sum_rows(da) if has_bias else None
    d_w_hr = None
    if w_hr is not None:
        # m = o tanh(c) of each step (padded steps have dh_cand = 0, so their m does not matter)
        d_w_hr = weight_grad(dh_cand, acts[3] * jnp.tanh(c_seq))
    return dx, dh0, dc0, d_w_ih, d_w_hh, db, db, d_w_hr, None


lstm_direction.defvjp(_lstm_fwd, _lstm_bwd)


# ---------------------------------------------------------------------------------
# GRU


def _gru_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    H = h0.shape[-1]
    x_proj, (b_x, b_hn) = project(x, w_ih), gru_step_biases(b_ih, b_hh)

    def step(carry, inputs):
        (h,) = carry
        xp_t, v = inputs
        xp_t = add(xp_t, b_x)
        gh = recurrent(h, w_hh)
        n_h = add(gh[:, 2 * H:], b_hn)
        r, z = jnp.split(jax.nn.sigmoid(xp_t[:, :2 * H] + gh[:, :2 * H]), 2, axis=-1)
        n = jnp.tanh(xp_t[:, 2 * H:] + r * n_h)
        h_new = (1 - z) * n + z * h
        return masked_outputs(v, (h_new,), (h,), ((r, z, n), n_h))

    (h_n,), ys = lax.scan(step, (h0,), (x_proj, valid), reverse=reverse)
    output, (acts, n_h), (h_seq,) = scan_outputs(ys, valid)
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
    h_prev = previous(h_seq, h0, reverse)

    def step(dh, inputs):
        dout_t, (r, z, n), nh_t, h_old, v = inputs
        dh_cand = valid_only(v, dh + dout_t)
        dn = dh_cand * (1 - z) * (1 - n * n)
        dz = dh_cand * (h_old - n) * z * (1 - z)
        dr = dn * nh_t * r * (1 - r)
        dn_h = dn * r  # gradient of W_hn h + b_hn
        dh_prev = mask_carry(v, jnp.concatenate([dr, dz, dn_h], axis=-1) @ w_hh + dh_cand * z, dh)
        return dh_prev, (jnp.concatenate([dr, dz, dn], axis=-1), dn_h)

    dh0, (dx_g, dn_h) = lax.scan(step, d_hn, (d_out, acts, n_h, h_prev, valid), reverse=not reverse)
    H = h0.shape[-1]
    dg_h = jnp.concatenate([dx_g[..., :2 * H], dn_h], axis=-1)
    d_w_ih = weight_grad(dx_g, x)
    d_w_hh = weight_grad(dg_h, h_prev)
    dx = dx_g @ w_ih
    d_b_ih = sum_rows(dx_g) if has_bias else None
    d_b_hh = sum_rows(dg_h) if has_bias else None
    return dx, dh0, d_w_ih, d_w_hh, d_b_ih, d_b_hh, None


gru_direction.defvjp(_gru_fwd, _gru_bwd)


# ---------------------------------------------------------------------------------
# the directions `bptt.DIRECTIONS` dispatches to: run(p: LayerParams, x, state, valid (T, B, 1) or None,
# reverse) -> (output, state_n)


def lstm(p, x, state, valid, reverse):
    output, h_n, c_n = lstm_direction(reverse, x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh, p.w_hr, valid)
    return output, (h_n, c_n)


def gru(p, x, state, valid, reverse):
    output, h_n = gru_direction(reverse, x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh, valid)
    return output, (h_n,)
