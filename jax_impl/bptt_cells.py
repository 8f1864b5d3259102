"""`bptt` for the catalogue cells: `ln_lstm`, `peephole_lstm`, `gru_reset_before`.

Same scheme as `bptt.py` (read its docstring first): a `lax.scan` forward that saves the
gate activations, and a `jax.custom_vjp` whose backward scan does only the inherently
sequential work -- the state derivatives and the recurrent product `dG_t W` -- and emits
per-step gradients; everything else (the weight, bias, gain and peephole gradients, the
input gradient, and `ln_lstm`'s input-side LayerNorm backward) is done afterwards over
all T*B rows at once.  Each cell's forward computes exactly `jax_impl/cells.py`'s step
(which `scan` runs), and its backward is `shared/reference.py`'s step backward,
reorganised so that only the sequential part stays in the loop.

Notation: `v` is the step's validity mask (t < len; all ones without lengths), `dh'` and
`dc'` the gradients reaching the step's new state (`dh' = v (dh + dout_t)`,
`dc' = v dc`); on a padded step every emitted gradient is zero and the carry passes
through (`dh <- (1 - v) dh + ...`), which is `scan`'s masking differentiated.

ln_lstm (LN(v) = (v - mean v) / sqrt(var v + 1e-5) * gain + beta, over the last axis)
-------
Forward.  Hoisted over all T*B rows: `gi = x W_ih^T + b_ih`, its statistics, and

    x_proj = LN_ih(gi) + beta_hh               (beta_hh is additive in every gate)

Per step, with the recurrent weights centred over their 4H output rows once,
`W_c = W_hh - mean_rows(W_hh)`, `b_c = b_hh - mean(b_hh)`:

    r = h W_c^T + b_c                          (= rec - mean(rec) for rec = h W_hh^T + b_hh)
    gh_hat = r / sqrt(mean(r^2) + eps)         (LN_hh without its mean pass)
    a = x_proj_t + gain_hh gh_hat;  i, f, o = sigmoid(a_i, a_f, a_o);  g = tanh(a_g)
    c_raw = f c + i g;  c_hat = normalise(c_raw);  c' = gain_c c_hat + beta_c;  h' = o tanh(c')

Backward, per step (reversed):

    dc_n  = dc' + dh' o (1 - tanh^2 c')                     (emitted: LN_c's gain/beta grads)
    dc_raw = rstd_c (dv - mean(dv) - c_hat mean(dv c_hat)),   dv = gain_c dc_n
    da = [dc_raw g i(1-i), dc_raw c f(1-f), dc_raw i (1-g^2), dh' tanh(c') o(1-o)]   (emitted)
    u = rstd_h (dw - gh_hat mean(dw gh_hat)),   dw = gain_hh da                       (emitted)
    dh <- u W_c;  dc <- dc_raw f

`u` is LN_hh's backward without its `- mean(dw)` term: that term is constant over the
4H features and `W_c`'s columns sum to zero, so `u W_c` equals `dgh W_hh` for the true
`dgh = u - mean(u)` (one reduction per step saved, as the centred weights save one in
the forward).  After the loop, over all T*B rows:

    dgi = LN_ih backward of da;  dW_ih = dgi^T X;  db_ih = sum dgi;  dx = dgi W_ih
    dW_hh = P (u^T H_prev);  db_hh = P sum u      (P: subtract the mean over the 4H rows,
                                                   the transpose of the centring)
    dgain_ih = sum da gi_hat;  dgain_hh = sum da gh_hat;  dbeta_ih = dbeta_hh = sum da
    dgain_c = sum dc_n c_hat;  dbeta_c = sum dc_n

peephole_lstm (peephole = [p_i, p_f, p_o])
-------------
Forward (x_proj = x W_ih^T + b_ih + b_hh hoisted):

    a = x_proj_t + h W_hh^T;  i = sigmoid(a_i + p_i c);  f = sigmoid(a_f + p_f c);  g = tanh(a_g)
    c' = f c + i g;  o = sigmoid(a_o + p_o c');  h' = o tanh(c')

Backward, per step:

    dz_o = dh' tanh(c') o(1-o);  dcc = dc' + dh' o (1 - tanh^2 c') + p_o dz_o
    dz_i = dcc g i(1-i);  dz_f = dcc c f(1-f);  dz_g = dcc i (1-g^2);  da = [dz_i, dz_f, dz_g, dz_o]
    dh <- da W_hh;  dc <- dcc f + p_i dz_i + p_f dz_f

After the loop: `dW_ih | dW_hh = da^T [X, H_prev]` (one GEMM), `db_ih = db_hh = sum da`,
`dx = da W_ih`, `dpeephole = [sum dz_i C_prev, sum dz_f C_prev, sum dz_o C]`.

gru_reset_before (W_hh = [W_hr; W_hz; W_hn])
----------------
Forward (x_proj = x W_ih^T + b_ih + b_hh hoisted; every bias is additive):

    r, z = sigmoid(x_proj_{r,z} + h W_h{r,z}^T);  n = tanh(x_proj_n + (r h) W_hn^T)
    h' = n + z (h - n)

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

from .bptt import _flat_gemm_t, _previous
from .cells import LN_EPS


def _project(x: jax.Array, w_ih: jax.Array, bias: jax.Array | None) -> jax.Array:
    """x W_ih^T (+ bias) for all T*B rows in one GEMM, (T, B, G*H)."""
    T, B, I = x.shape
    out = (x.reshape(T * B, I) @ w_ih.T).reshape(T, B, -1)
    return out if bias is None else out + bias


def _add(a, b):
    """a + b where either may be None (an absent bias)."""
    return a if b is None else (b if a is None else a + b)


def _sum_rows(a: jax.Array) -> jax.Array:
    return jnp.sum(a, axis=(0, 1))


def _mask_carry(v, new, old):
    """The carry after a step: the step's value where valid, `old` passed through where padded."""
    return new if v is None else new + jnp.where(v, 0, old)


def _valid_only(v, a):
    return a if v is None else jnp.where(v, a, 0)


# ---------------------------------------------------------------------------------
# ln_lstm


def _normalise(v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(v_hat, rstd): v centred and scaled to unit variance over the last axis (biased variance)."""
    centred = v - jnp.mean(v, axis=-1, keepdims=True)
    rstd = lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + LN_EPS)
    return centred * rstd, rstd


def _ln_backward(dv: jax.Array, v_hat: jax.Array, rstd: jax.Array) -> jax.Array:
    """d(input) of `_normalise` given dv = d(v_hat): rstd (dv - mean dv - v_hat mean(dv v_hat))."""
    return rstd * (dv - jnp.mean(dv, axis=-1, keepdims=True)
                   - v_hat * jnp.mean(dv * v_hat, axis=-1, keepdims=True))


def _centred_rows(a: jax.Array) -> jax.Array:
    """a minus its mean over the first axis (the 4H gate rows)."""
    return a - jnp.mean(a, axis=0, keepdims=True)


def _ln_lstm_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, g_ih, be_ih, g_hh, be_hh, g_c, be_c, valid):
    gi_hat, rstd_i = _normalise(_project(x, w_ih, b_ih))
    x_proj = gi_hat * g_ih + (be_ih + be_hh)
    # centred recurrent weights: the GEMM yields rec - mean(rec), so LN_hh needs no mean pass
    w_c_t = _centred_rows(w_hh).T
    b_c = None if b_hh is None else b_hh - jnp.mean(b_hh)

    def step(carry, inputs):
        h, c = carry
        xp_t, v = inputs
        r = _add(h @ w_c_t, b_c)
        rstd_h = lax.rsqrt(jnp.mean(r * r, axis=-1, keepdims=True) + LN_EPS)
        gh_hat = r * rstd_h
        a = xp_t + gh_hat * g_hh
        i, f, g, o = jnp.split(a, 4, axis=-1)
        i, f, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jax.nn.sigmoid(o)
        g = jnp.tanh(g)
        c_hat, rstd_c = _normalise(f * c + i * g)
        c_new = c_hat * g_c + be_c
        h_new = o * jnp.tanh(c_new)
        acts = jnp.concatenate([i, f, g, o], axis=-1)
        saved = (acts, gh_hat, rstd_h, c_hat, rstd_c)
        if v is None:  # output = h sequence: emit it once
            return (h_new, c_new), (h_new, c_new) + saved
        h_new = jnp.where(v, h_new, h)
        c_new = jnp.where(v, c_new, c)
        out = jnp.where(v, h_new, jnp.zeros((), h_new.dtype))
        return (h_new, c_new), (out, c_new) + saved + (h_new,)

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x_proj, valid), reverse=reverse)
    output, c_seq = ys[:2]
    h_seq = output if valid is None else ys[7]
    return (output, h_n, c_n), (gi_hat, rstd_i, h_seq, c_seq) + tuple(ys[2:7])


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
    return out, (x, h0, c0, w_ih, w_hh, b_ih is not None, g_ih, g_hh, g_c, valid) + saved


def _ln_lstm_bwd(reverse, res, cot):
    (x, h0, c0, w_ih, w_hh, has_bias, g_ih, g_hh, g_c, valid,
     gi_hat, rstd_i, h_seq, c_seq, acts, gh_hat, rstd_h, c_hat, rstd_c) = res
    d_out, d_hn, d_cn = cot
    w_c = _centred_rows(w_hh)
    c_prev = _previous(c_seq, c0, reverse)

    def step(carry, inputs):
        dh, dc = carry
        dout_t, a, gh_hat_t, rstd_h_t, c_old, c_new, c_hat_t, rstd_c_t, v = inputs
        i, f, g, o = jnp.split(a, 4, axis=-1)
        dh_new = _valid_only(v, dh + dout_t)
        tanh_c = jnp.tanh(c_new)
        dc_n = _valid_only(v, dc) + dh_new * o * (1 - tanh_c * tanh_c)
        dc_raw = _ln_backward(dc_n * g_c, c_hat_t, rstd_c_t)
        da = jnp.concatenate([dc_raw * g * i * (1 - i), dc_raw * c_old * f * (1 - f), dc_raw * i * (1 - g * g),
                              dh_new * tanh_c * o * (1 - o)], axis=-1)
        dw = da * g_hh
        u = rstd_h_t * (dw - gh_hat_t * jnp.mean(dw * gh_hat_t, axis=-1, keepdims=True))
        dh_prev = _mask_carry(v, u @ w_c, dh)
        dc_prev = _mask_carry(v, dc_raw * f, dc)
        return (dh_prev, dc_prev), (da, u, dc_n)

    (dh0, dc0), (da, u, dc_n) = lax.scan(
        step, (d_hn, d_cn), (d_out, acts, gh_hat, rstd_h, c_prev, c_seq, c_hat, rstd_c, valid), reverse=not reverse)
    dgi = _ln_backward(da * g_ih, gi_hat, rstd_i)
    d_w_ih = _flat_gemm_t(dgi, x)
    dx = dgi @ w_ih
    d_w_hh = _centred_rows(_flat_gemm_t(u, _previous(h_seq, h0, reverse)))
    d_b_ih = _sum_rows(dgi) if has_bias else None
    d_b_hh = _centred_rows(_sum_rows(u)) if has_bias else None
    d_beta = _sum_rows(da)
    return (dx, dh0, dc0, d_w_ih, d_w_hh, d_b_ih, d_b_hh, _sum_rows(da * gi_hat), d_beta, _sum_rows(da * gh_hat),
            d_beta, _sum_rows(dc_n * c_hat), _sum_rows(dc_n), None)


ln_lstm_direction.defvjp(_ln_lstm_fwd, _ln_lstm_bwd)


# ---------------------------------------------------------------------------------
# peephole_lstm


def _peephole_forward(reverse, x, h0, c0, w_ih, w_hh, b_ih, b_hh, peephole, valid):
    x_proj = _project(x, w_ih, _add(b_ih, b_hh))
    w_hh_t = w_hh.T
    p_i, p_f, p_o = jnp.split(peephole, 3)

    def step(carry, inputs):
        h, c = carry
        xp_t, v = inputs
        a = xp_t + h @ w_hh_t
        a_i, a_f, a_g, a_o = jnp.split(a, 4, axis=-1)
        i = jax.nn.sigmoid(a_i + p_i * c)
        f = jax.nn.sigmoid(a_f + p_f * c)
        g = jnp.tanh(a_g)
        c_new = f * c + i * g
        o = jax.nn.sigmoid(a_o + p_o * c_new)
        h_new = o * jnp.tanh(c_new)
        acts = jnp.concatenate([i, f, g, o], axis=-1)
        if v is None:
            return (h_new, c_new), (h_new, acts, c_new)
        h_new = jnp.where(v, h_new, h)
        c_new = jnp.where(v, c_new, c)
        out = jnp.where(v, h_new, jnp.zeros((), h_new.dtype))
        return (h_new, c_new), (out, acts, c_new, h_new)

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x_proj, valid), reverse=reverse)
    output, acts, c_seq = ys[:3]
    h_seq = output if valid is None else ys[3]
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
    c_prev = _previous(c_seq, c0, reverse)

    def step(carry, inputs):
        dh, dc = carry
        dout_t, a, c_old, c_new, v = inputs
        i, f, g, o = jnp.split(a, 4, axis=-1)
        dh_new = _valid_only(v, dh + dout_t)
        tanh_c = jnp.tanh(c_new)
        dz_o = dh_new * tanh_c * o * (1 - o)
        dcc = _valid_only(v, dc) + dh_new * o * (1 - tanh_c * tanh_c) + dz_o * p_o
        dz_i = dcc * g * i * (1 - i)
        dz_f = dcc * c_old * f * (1 - f)
        da = jnp.concatenate([dz_i, dz_f, dcc * i * (1 - g * g), dz_o], axis=-1)
        dh_prev = _mask_carry(v, da @ w_hh, dh)
        dc_prev = _mask_carry(v, dcc * f + dz_i * p_i + dz_f * p_f, dc)
        return (dh_prev, dc_prev), da

    (dh0, dc0), da = lax.scan(step, (d_hn, d_cn), (d_out, acts, c_prev, c_seq, valid), reverse=not reverse)
    H = c0.shape[-1]
    # as bptt's LSTM: dW_ih and dW_hh share the left operand, one GEMM against [x, h_prev]
    d_w = _flat_gemm_t(da, jnp.concatenate([x, _previous(h_seq, h0, reverse)], axis=-1))
    d_w_ih, d_w_hh = d_w[:, :x.shape[-1]], d_w[:, x.shape[-1]:]
    dx = da @ w_ih
    db = _sum_rows(da) if has_bias else None
    # padded steps have da = 0, so whatever c holds there does not count
    d_peephole = jnp.concatenate([_sum_rows(da[..., :H] * c_prev), _sum_rows(da[..., H:2 * H] * c_prev),
                                  _sum_rows(da[..., 3 * H:] * c_seq)])
    return dx, dh0, dc0, d_w_ih, d_w_hh, db, db, d_peephole, None


peephole_lstm_direction.defvjp(_peephole_fwd, _peephole_bwd)


# ---------------------------------------------------------------------------------
# gru_reset_before


def _gru_rb_forward(reverse, x, h0, w_ih, w_hh, b_ih, b_hh, valid):
    x_proj = _project(x, w_ih, _add(b_ih, b_hh))
    H = h0.shape[-1]
    w_rz_t, w_n_t = w_hh[:2 * H].T, w_hh[2 * H:].T

    def step(h, inputs):
        xp_t, v = inputs
        r, z = jnp.split(jax.nn.sigmoid(xp_t[:, :2 * H] + h @ w_rz_t), 2, axis=-1)
        n = jnp.tanh(xp_t[:, 2 * H:] + (r * h) @ w_n_t)
        h_new = n + z * (h - n)
        acts = jnp.concatenate([r, z, n], axis=-1)
        if v is None:
            return h_new, (h_new, acts)
        h_new = jnp.where(v, h_new, h)
        out = jnp.where(v, h_new, jnp.zeros((), h_new.dtype))
        return h_new, (out, acts, h_new)

    h_n, ys = lax.scan(step, h0, (x_proj, valid), reverse=reverse)
    output, acts = ys[:2]
    h_seq = output if valid is None else ys[2]
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
    h_prev = _previous(h_seq, h0, reverse)

    def step(dh, inputs):
        dout_t, a, h_old, v = inputs
        r, z, n = jnp.split(a, 3, axis=-1)
        dh_new = _valid_only(v, dh + dout_t)
        da_n = dh_new * (1 - z) * (1 - n * n)
        da_z = dh_new * (h_old - n) * z * (1 - z)
        d_rh = da_n @ w_n
        da_r = d_rh * h_old * r * (1 - r)
        dg = jnp.concatenate([da_r, da_z, da_n], axis=-1)
        dh_prev = dh_new * z + d_rh * r + dg[:, :2 * H] @ w_rz
        return _mask_carry(v, dh_prev, dh), dg

    dh0, dg = lax.scan(step, d_hn, (d_out, acts, h_prev, valid), reverse=not reverse)
    d_w_ih = _flat_gemm_t(dg, x)
    dx = dg @ w_ih
    d_w_hh = jnp.concatenate([_flat_gemm_t(dg[..., :2 * H], h_prev),
                              _flat_gemm_t(dg[..., 2 * H:], acts[..., :H] * h_prev)])
    db = _sum_rows(dg) if has_bias else None
    return dx, dh0, d_w_ih, d_w_hh, db, db, None


gru_reset_before_direction.defvjp(_gru_rb_fwd, _gru_rb_bwd)


# ---------------------------------------------------------------------------------
# the table `bptt.run_direction` dispatches to


def _run_ln_lstm(p, x, h0, c0, valid, reverse):
    e = p.extras
    return ln_lstm_direction(reverse, x, h0, c0, p.w_ih, p.w_hh, p.b_ih, p.b_hh,
                             e["layernorm_ih_weight"], e["layernorm_ih_bias"], e["layernorm_hh_weight"],
                             e["layernorm_hh_bias"], e["layernorm_c_weight"], e["layernorm_c_bias"], valid)


def _run_peephole_lstm(p, x, h0, c0, valid, reverse):
    return peephole_lstm_direction(reverse, x, h0, c0, p.w_ih, p.w_hh, p.b_ih, p.b_hh, p.extras["peephole"], valid)


def _run_gru_reset_before(p, x, h0, c0, valid, reverse):
    output, h_n = gru_reset_before_direction(reverse, x, h0, p.w_ih, p.w_hh, p.b_ih, p.b_hh, valid)
    return output, h_n, None


DIRECTIONS = {
    # cell -> run(p: LayerParams, x, h0, c0, valid (T, B, 1) or None, reverse) -> (output, h_n, c_n or None)
    "ln_lstm": _run_ln_lstm,
    "peephole_lstm": _run_peephole_lstm,
    "gru_reset_before": _run_gru_reset_before,
}
