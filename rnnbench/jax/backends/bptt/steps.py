"""The hand-written backward of the catalogue cells `ln_lstm`, `peephole_lstm`, `gru_reset_before`.

Same scheme as `lstm_gru.py` (read its docstring first): a `lax.scan` forward that saves
what the backward needs, and a `jax.custom_vjp` whose backward scan does only the
inherently sequential work -- the state derivatives and the recurrent product `dG_t W` --
and emits the per-step gate gradients; the weight and input gradients are then one GEMM
each over all T*B rows.  Each forward computes the catalogue's equations (what
`rnnbench.jax.cells`' step computes and `scan` runs); each backward is `shared/reference.py`'s
step backward, reorganised so that only the sequential part stays in the loop.

Notation: `v` is the step's validity mask (t < len; all ones without lengths), `dh'` and
`dc'` the gradients reaching the step's new state (`dh' = v (dh + dout_t)`,
`dc' = v dc`); on a padded step every emitted gradient is zero and the carry passes
through (`dh <- (1 - v) dh + ...`), which is `scan`'s masking differentiated.

The array layout (biases added in the step, weight gradients through `common.weight_grad`,
column sums through `common.sum_rows`, per-row sums carried in the backward scan, per-gate
residuals, `ln_lstm`'s gates recomputed rather than saved) was chosen by CPU measurements
(see the JAX page of the docs).

ln_lstm (LN(v) = (v - mean v) / sqrt(var v + 1e-5) * gain + beta, over the last axis)
-------
Both gate LayerNorms act on linear maps, so their mean pass is folded into the weights:
with `P` the centring over the 4H output rows (`P W = W - mean_rows(W)`),
`LN(x W^T + b)` only needs `v = x (P W)^T + P b`, which has zero mean already.

Forward.  Hoisted: `gi = x (P W_ih)^T` for all T*B rows.  Per step (the input half of
step t is computed in step t-1 and carried):

    vi = gi_t + P b_ih;   rstd_i = 1 / sqrt(mean(vi^2) + eps)          (LN_ih, no mean pass)
    vh = h (P W_hh)^T + P b_hh;   gh_hat = vh / sqrt(mean(vh^2) + eps)  (LN_hh, no mean pass)
    a = gain_ih rstd_i vi + beta_ih + beta_hh + gain_hh gh_hat
    i, f, o = sigmoid(a_i, a_f, a_o);  g = tanh(a_g)
    c_hat = normalise(f c + i g);  c' = gain_c c_hat + beta_c;  h' = o tanh(c')

Saved: gi, gh_hat, rstd_i, rstd_h, c_hat, rstd_c and the h, c sequences.

Backward, per step (reversed), the gates recomputed from gi, rstd_i and gh_hat (the
pre-activation `a` again computed one step ahead and carried):

    dc_n = dc' + dh' o (1 - tanh^2 c')
    dc_raw = rstd_c (dw_c - mean(dw_c) - c_hat mean(dw_c c_hat)),   dw_c = gain_c dc_n
    da = [dc_raw g i(1-i), dc_raw c f(1-f), dc_raw i (1-g^2), dh' tanh(c') o(1-o)]      (emitted)
    m_h = mean(gain_hh da gh_hat);  m_i = mean(gain_ih da rstd_i vi)                     (emitted)
    dh <- rstd_h (gain_hh da - gh_hat m_h) (P W_hh);  dc <- dc_raw f
    carry sums of da gi_hat, da, da gh_hat, dc_n c_hat, dc_n    (gi_hat = rstd_i vi)

`rstd (gain da - v_hat m)` is LN's backward without its `- mean(.)` term: that term is
constant over the 4H features and `P W`'s columns sum to zero, so it drops out of
`dh`; for the weights, `P` applied to the gradient puts it back.  After the loop:

    dgi = rstd_i (gain_ih da - rstd_i vi m_i);  u = rstd_h (gain_hh da - gh_hat m_h)
    dW_ih = P (dgi^T X);  db_ih = P sum dgi;  dx = dgi (P W_ih)
    dW_hh = P (u^T H_prev);  db_hh = P sum u
    dgain_ih, dbeta_ih = dbeta_hh, dgain_hh, dgain_c, dbeta_c: the carried sums, summed over the batch

peephole_lstm (peephole = [p_i, p_f, p_o])
-------------
Forward: the catalogue's equations, `x_proj = x W_ih^T` hoisted and `b = b_ih + b_hh`
added in the step; `a = x_proj_t + h W_hh^T + b` are the four gates' pre-activations
before the peephole terms.

Backward, per step:

    dz_o = dh' tanh(c') o(1-o);  dcc = dc' + dh' o (1 - tanh^2 c') + p_o dz_o
    dz_i = dcc g i(1-i);  dz_f = dcc c f(1-f);  dz_g = dcc i (1-g^2);  da = [dz_i, dz_f, dz_g, dz_o]
    dh <- da W_hh;  dc <- dcc f + p_i dz_i + p_f dz_f;  carry sums of dz_i c, dz_f c, dz_o c'

After the loop: `dW_ih = da^T X`, `dW_hh = da^T H_prev`, `db_ih = db_hh = sum da`,
`dx = da W_ih`, `dpeephole` = the carried sums summed over the batch.

gru_reset_before (W_hh = [W_hr; W_hz; W_hn])
----------------
Forward: the catalogue's equations, `x_proj = x W_ih^T` hoisted and `b = b_ih + b_hh`
added in the step (every bias is additive here); `h' = n + z (h - n)`.

Backward, per step (two dependent GEMMs, as the forward):

    da_n = dh' (1-z)(1-n^2);  da_z = dh' (h - n) z(1-z);  d_rh = da_n W_hn
    da_r = d_rh h r(1-r);  dh <- dh' z + d_rh r + [da_r, da_z] W_h{r,z}

After the loop, with dG = [da_r, da_z, da_n]: `dW_ih = dG^T X`, `dx = dG W_ih`,
`db_ih = db_hh = sum dG`, `dW_h{r,z} = [da_r, da_z]^T H_prev`, `dW_hn = da_n^T (R * H_prev)`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ...cells import LN_EPS, advance
from .common import (
    add, mask_carry, masked_outputs, previous, project, scan_outputs, sum_rows, valid_only, weight_grad)

# ---------------------------------------------------------------------------------
# helpers


def _normalise(v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(v_hat, rstd): v centred and scaled to unit variance over the last axis (biased variance)."""
    centred = v - jnp.mean(v, axis=-1, keepdims=True)
    rstd = lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + LN_EPS)
    return centred * rstd, rstd


def _ln_backward(dv: jax.Array, v_hat: jax.Array, rstd: jax.Array) -> jax.Array:
    """d(input) of `_normalise` given dv = d(v_hat): rstd (dv - mean dv - v_hat mean(dv v_hat))."""
    return rstd * (dv - jnp.mean(dv, axis=-1, keepdims=True)
                   - v_hat * jnp.mean(dv * v_hat, axis=-1, keepdims=True))


def _centred(a: jax.Array) -> jax.Array:
    """P a: a minus its mean over the first axis (the 4H gate rows of a weight, bias or gradient)."""
    return a - jnp.mean(a, axis=0, keepdims=True)


# ---------------------------------------------------------------------------------
# ln_lstm


def _gates(a):
    """i, f, g, o from the (B, 4H) pre-activation."""
    i, f, g, o = jnp.split(a, 4, axis=-1)
    return jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)


def _at(seq, t):
    """Step t (traced) of a (T, ...) array."""
    return lax.dynamic_index_in_dim(seq, t, keepdims=False)


def _ln_lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, g_ih, be_ih, g_hh, be_hh, g_c, be_c, valid):
    T = x.shape[0]
    gi = project(x, _centred(w_ih))
    b_ci = None if b_ih is None else _centred(b_ih)
    w_c_t = _centred(w_hh).T
    b_ch = None if b_hh is None else _centred(b_hh)
    beta = be_ih + be_hh
    step_dir = -1 if reverse else 1

    def input_half(t):  # (LN_ih(.) + beta, rstd_i) of step t, full width
        vi = add(_at(gi, t), b_ci)
        rstd_i = lax.rsqrt(jnp.mean(vi * vi, axis=-1, keepdims=True) + LN_EPS)
        return vi * rstd_i * g_ih + beta, rstd_i

    def step(carry, inputs):
        h, c, xin = carry
        t, v = inputs
        vh = add(h @ w_c_t, b_ch)
        rstd_h = lax.rsqrt(jnp.mean(vh * vh, axis=-1, keepdims=True) + LN_EPS)
        gh_hat = vh * rstd_h
        i, f, g, o = _gates(xin + gh_hat * g_hh)
        c_hat, rstd_c = _normalise(f * c + i * g)
        c_new = c_hat * g_c + be_c
        h_new = o * jnp.tanh(c_new)
        # the next step's input half, carried: a fusion that reads a scanned (T, B, 4H) array and
        # splits it into gates in the same pass is several times slower on XLA's CPU backend
        xin, rstd_i_next = input_half(jnp.clip(t + step_dir, 0, T - 1))
        saved = (gh_hat, rstd_h, c_hat, rstd_c, rstd_i_next)
        if v is None:  # output = h sequence: emit it once
            return (h_new, c_new, xin), (h_new, c_new) + saved
        (h_new, c_new), out = advance(v, (h_new, c_new), (h, c))
        return (h_new, c_new, xin), (out, c_new) + saved + (h_new,)

    xin0, rstd_i0 = input_half(T - 1 if reverse else 0)
    (h_n, c_n, _), ys = lax.scan(step, (h0, c0, xin0), (jnp.arange(T), valid), reverse=reverse)
    output, c_seq = ys[:2]
    h_seq = output if valid is None else ys[7]
    # ys[6][t] is rstd_i of the step after t (in the scan's order); put each at its own step
    rstd_i = (jnp.concatenate([ys[6][1:], rstd_i0[None]]) if reverse
              else jnp.concatenate([rstd_i0[None], ys[6][:-1]]))
    return (output, h_n, c_n), (gi, rstd_i, h_seq, c_seq) + tuple(ys[2:6])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def ln_lstm_direction(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, g_ih, be_ih, g_hh, be_hh, g_c, be_c, valid):
    """One ln_lstm direction over time-major x (T, B, I) -> (output, h_n, c_n); see the module docstring.

    `g_*`/`be_*` are the LayerNorm gains and biases (`layernorm_{ih,hh,c}_{weight,bias}`);
    `b_ih`/`b_hh`/`valid` may be None (no bias / no lengths).
    """
    return _ln_lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, g_ih, be_ih, g_hh, be_hh, g_c, be_c,
                            valid)[0]


def _ln_lstm_fwd(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, g_ih, be_ih, g_hh, be_hh, g_c, be_c, valid):
    out, saved = _ln_lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, g_ih, be_ih, g_hh, be_hh, g_c, be_c,
                                  valid)
    b_ci = None if b_ih is None else _centred(b_ih)
    return out, (x, h0, c0, w_ih, w_hh, b_ci, g_ih, g_hh, g_c, be_ih + be_hh, valid) + saved


def _ln_lstm_bwd(reverse, res, cot):
    (x, h0, c0, w_ih, w_hh, b_ci, g_ih, g_hh, g_c, beta, valid,
     gi, rstd_i, h_seq, c_seq, gh_hat, rstd_h, c_hat, rstd_c) = res
    d_out, d_hn, d_cn = cot
    T = x.shape[0]
    w_c = _centred(w_hh)
    c_prev = previous(c_seq, c0, reverse)
    step_dir = 1 if reverse else -1  # the backward walks the forward's steps in reverse

    def pre_activation(t):  # recomputed, carried one step ahead as in the forward
        return add(_at(gi, t), b_ci) * _at(rstd_i, t) * g_ih + _at(gh_hat, t) * g_hh + beta

    def step(carry, inputs):
        dh, dc, acc, a = carry
        dout_t, t, gi_t, rstd_i_t, gh_hat_t, rstd_h_t, c_old, c_new, c_hat_t, rstd_c_t, v = inputs
        i, f, g, o = _gates(a)
        dh_new = valid_only(v, dh + dout_t)
        tanh_c = jnp.tanh(c_new)
        dc_n = valid_only(v, dc) + dh_new * o * (1 - tanh_c * tanh_c)
        dc_raw = _ln_backward(dc_n * g_c, c_hat_t, rstd_c_t)
        da = jnp.concatenate([dc_raw * g * i * (1 - i), dc_raw * c_old * f * (1 - f), dc_raw * i * (1 - g * g),
                              dh_new * tanh_c * o * (1 - o)], axis=-1)
        dw = da * g_hh
        m_h = jnp.mean(dw * gh_hat_t, axis=-1, keepdims=True)
        dh_prev = mask_carry(v, (rstd_h_t * (dw - gh_hat_t * m_h)) @ w_c, dh)
        dc_prev = mask_carry(v, dc_raw * f, dc)
        gi_hat = add(gi_t, b_ci) * rstd_i_t
        m_i = jnp.mean(da * g_ih * gi_hat, axis=-1, keepdims=True)
        # gain/beta gradients: per-row partial sums while the operands are in cache
        acc = (acc[0] + da * gi_hat, acc[1] + da, acc[2] + da * gh_hat_t, acc[3] + dc_n * c_hat_t, acc[4] + dc_n)
        a = pre_activation(jnp.clip(t + step_dir, 0, T - 1))
        return (dh_prev, dc_prev, acc, a), (da, m_i, m_h)

    B, H = c0.shape
    z4, z1 = jnp.zeros((B, 4 * H), c0.dtype), jnp.zeros((B, H), c0.dtype)
    (dh0, dc0, acc, _), (da, m_i, m_h) = lax.scan(
        step, (d_hn, d_cn, (z4, z4, z4, z1, z1), pre_activation(0 if reverse else T - 1)),
        (d_out, jnp.arange(T), gi, rstd_i, gh_hat, rstd_h, c_prev, c_seq, c_hat, rstd_c, valid), reverse=not reverse)
    d_g_ih, d_beta, d_g_hh, d_g_c, d_be_c = (jnp.sum(a, axis=0) for a in acc)
    dgi = rstd_i * (da * g_ih - add(gi, b_ci) * rstd_i * m_i)
    u = rstd_h * (da * g_hh - gh_hat * m_h)
    d_w_ih = _centred(weight_grad(dgi, x))
    dx = dgi @ _centred(w_ih)
    d_w_hh = _centred(weight_grad(u, previous(h_seq, h0, reverse)))
    has_bias = b_ci is not None
    d_b_ih = _centred(sum_rows(dgi)) if has_bias else None
    d_b_hh = _centred(sum_rows(u)) if has_bias else None
    return (dx, dh0, dc0, d_w_ih, d_w_hh, d_b_ih, d_b_hh, d_g_ih, d_beta, d_g_hh, d_beta, d_g_c, d_be_c, None)


ln_lstm_direction.defvjp(_ln_lstm_fwd, _ln_lstm_bwd)


# ---------------------------------------------------------------------------------
# peephole_lstm


def _peephole_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, peephole, valid):
    x_proj = project(x, w_ih)
    b = None if b_ih is None else b_ih + b_hh
    w_hh_t = w_hh.T
    p_i, p_f, p_o = jnp.split(peephole, 3)

    def step(carry, inputs):
        h, c = carry
        xp_t, v = inputs
        a = add(xp_t + h @ w_hh_t, b)
        a_i, a_f, a_g, a_o = jnp.split(a, 4, axis=-1)
        i = jax.nn.sigmoid(a_i + p_i * c)
        f = jax.nn.sigmoid(a_f + p_f * c)
        g = jnp.tanh(a_g)
        c_new = f * c + i * g
        o = jax.nn.sigmoid(a_o + p_o * c_new)
        h_new = o * jnp.tanh(c_new)
        # saved per gate: a fusion that reads a scanned (T, B, 4H) array and splits it into gates
        # in the same pass is several times slower on XLA's CPU backend (the backward's would)
        return masked_outputs(v, (h_new, c_new), (h, c), (i, f, g, o))

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x_proj, valid), reverse=reverse)
    output, acts, (h_seq, c_seq) = scan_outputs(ys, valid)
    return (output, h_n, c_n), (acts, h_seq, c_seq)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def peephole_lstm_direction(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, peephole, valid):
    """One peephole_lstm direction over time-major x (T, B, I) -> (output, h_n, c_n); see the module docstring."""
    return _peephole_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, peephole, valid)[0]


def _peephole_fwd(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, peephole, valid):
    out, saved = _peephole_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, peephole, valid)
    return out, (x, h0, c0, w_ih, w_hh, b_ih is not None, peephole, valid) + saved


def _peephole_bwd(reverse, res, cot):
    x, h0, c0, w_ih, w_hh, has_bias, peephole, valid, acts, h_seq, c_seq = res
    d_out, d_hn, d_cn = cot
    p_i, p_f, p_o = jnp.split(peephole, 3)
    c_prev = previous(c_seq, c0, reverse)

    def step(carry, inputs):
        dh, dc, acc = carry
        dout_t, (i, f, g, o), c_old, c_new, v = inputs
        dh_new = valid_only(v, dh + dout_t)
        tanh_c = jnp.tanh(c_new)
        dz_o = dh_new * tanh_c * o * (1 - o)
        dcc = valid_only(v, dc) + dh_new * o * (1 - tanh_c * tanh_c) + dz_o * p_o
        dz_i = dcc * g * i * (1 - i)
        dz_f = dcc * c_old * f * (1 - f)
        da = jnp.concatenate([dz_i, dz_f, dcc * i * (1 - g * g), dz_o], axis=-1)
        dh_prev = mask_carry(v, da @ w_hh, dh)
        dc_prev = mask_carry(v, dcc * f + dz_i * p_i + dz_f * p_f, dc)
        # peephole gradients: per-row partial sums while the operands are in cache
        acc = (acc[0] + dz_i * c_old, acc[1] + dz_f * c_old, acc[2] + dz_o * c_new)
        return (dh_prev, dc_prev, acc), da

    zeros = jnp.zeros_like(c0)
    (dh0, dc0, acc), da = lax.scan(step, (d_hn, d_cn, (zeros, zeros, zeros)), (d_out, acts, c_prev, c_seq, valid),
                                   reverse=not reverse)
    d_w_ih = weight_grad(da, x)
    d_w_hh = weight_grad(da, previous(h_seq, h0, reverse))
    dx = da @ w_ih
    db = sum_rows(da) if has_bias else None
    d_peephole = jnp.concatenate([jnp.sum(a, axis=0) for a in acc])
    return dx, dh0, dc0, d_w_ih, d_w_hh, db, db, d_peephole, None


peephole_lstm_direction.defvjp(_peephole_fwd, _peephole_bwd)


# ---------------------------------------------------------------------------------
# gru_reset_before


def _gru_rb_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    x_proj = project(x, w_ih)
    b = None if b_ih is None else b_ih + b_hh
    H = h0.shape[-1]
    w_rz_t, w_n_t = w_hh[:2 * H].T, w_hh[2 * H:].T
    b_rz, b_n = (None, None) if b is None else (b[:2 * H], b[2 * H:])

    def step(carry, inputs):
        (h,) = carry
        xp_t, v = inputs
        r, z = jnp.split(jax.nn.sigmoid(add(xp_t[:, :2 * H] + h @ w_rz_t, b_rz)), 2, axis=-1)
        n = jnp.tanh(add(xp_t[:, 2 * H:] + (r * h) @ w_n_t, b_n))
        h_new = n + z * (h - n)
        return masked_outputs(v, (h_new,), (h,), (r, z, n))  # per gate, see _peephole_forward

    (h_n,), ys = lax.scan(step, (h0,), (x_proj, valid), reverse=reverse)
    output, acts, (h_seq,) = scan_outputs(ys, valid)
    return (output, h_n), (acts, h_seq)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def gru_reset_before_direction(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    """One gru_reset_before direction over time-major x (T, B, I) -> (output, h_n); see the module docstring."""
    return _gru_rb_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid)[0]


def _gru_rb_fwd(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    out, saved = _gru_rb_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid)
    return out, (x, h0, w_ih, w_hh, b_ih is not None, valid) + saved


def _gru_rb_bwd(reverse, res, cot):
    x, h0, w_ih, w_hh, has_bias, valid, acts, h_seq = res
    d_out, d_hn = cot
    H = h0.shape[-1]
    w_rz, w_n = w_hh[:2 * H], w_hh[2 * H:]
    h_prev = previous(h_seq, h0, reverse)

    def step(dh, inputs):
        dout_t, (r, z, n), h_old, v = inputs
        dh_new = valid_only(v, dh + dout_t)
        da_n = dh_new * (1 - z) * (1 - n * n)
        da_z = dh_new * (h_old - n) * z * (1 - z)
        d_rh = da_n @ w_n
        da_r = d_rh * h_old * r * (1 - r)
        dg = jnp.concatenate([da_r, da_z, da_n], axis=-1)
        dh_prev = dh_new * z + d_rh * r + dg[:, :2 * H] @ w_rz
        return mask_carry(v, dh_prev, dh), dg

    dh0, dg = lax.scan(step, d_hn, (d_out, acts, h_prev, valid), reverse=not reverse)
    d_w_ih = weight_grad(dg, x)
    dx = dg @ w_ih
    d_w_hh = jnp.concatenate([weight_grad(dg[..., :2 * H], h_prev),
                              weight_grad(dg[..., 2 * H:], acts[0] * h_prev)])
    db = sum_rows(dg) if has_bias else None
    return dx, dh0, d_w_ih, d_w_hh, db, db, None


gru_reset_before_direction.defvjp(_gru_rb_fwd, _gru_rb_bwd)


# ---------------------------------------------------------------------------------
# the directions `bptt.DIRECTIONS` dispatches to: run(p: LayerParams, x, state, valid (T, B, 1) or None,
# reverse) -> (output, state_n)


def ln_lstm(p, x, state, valid, reverse):
    e = p.extras
    output, h_n, c_n = ln_lstm_direction(reverse, x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh,
                                         e["layernorm_ih_weight"], e["layernorm_ih_bias"], e["layernorm_hh_weight"],
                                         e["layernorm_hh_bias"], e["layernorm_c_weight"], e["layernorm_c_bias"], valid)
    return output, (h_n, c_n)


def peephole_lstm(p, x, state, valid, reverse):
    output, h_n, c_n = peephole_lstm_direction(reverse, x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh,
                                               p.extras["peephole"], valid)
    return output, (h_n, c_n)


def gru_reset_before(p, x, state, valid, reverse):
    output, h_n = gru_reset_before_direction(reverse, x, *state, p.w_ih, p.w_hh, p.b_ih, p.b_hh, valid)
    return output, (h_n,)
