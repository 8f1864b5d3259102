"""The reference's cell steps: each catalogue cell's step and its hand-written step backward.

Batch-major NumPy in float64 (see `rnnbench.reference` for the step signature); the
equations are the catalogue's (`rnnbench.core.catalogue`), written out in each step's docstring with
its derivatives in the backward's.  `sigmoid` and `layer_norm` are complex-safe, so a user's
own cell may call them under the complex step (`rnnbench.reference.table`).
"""

from __future__ import annotations

import numpy as np

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, used by ln_lstm's three norms


def sigmoid(a: np.ndarray) -> np.ndarray:
    """Logistic function, without overflow warnings for large |a|; complex-safe.

    For real `a` this is exp(-|a|)-based; for complex `a` (the complex step) the same
    branches are chosen by Re(a) and computed analytically, so
    Im(sigmoid(a + ih)) / h = sigmoid'(a) exactly.
    """
    a = np.asarray(a)
    if np.iscomplexobj(a):
        e = np.exp(np.where(a.real >= 0, -a, a))  # Re(exponent) <= 0: no overflow
        positive = a.real >= 0
    else:
        e = np.exp(-np.abs(a))
        positive = a >= 0
    return np.where(positive, 1.0 / (1.0 + e), e / (1.0 + e))


def layer_norm(v, gain, bias, eps: float = LAYER_NORM_EPS):
    """nn.LayerNorm over the last axis: (v - mean) / sqrt(var + eps) * gain + bias.

    Biased variance (mean of squared deviations), eps inside the square root.
    Returns (y, v_hat, rstd) where v_hat is the normalised v and rstd = 1/sqrt(var+eps).
    Complex-safe (no abs), so user cells may call it under the complex step.
    """
    mean = v.mean(axis=-1, keepdims=True)
    centred = v - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    v_hat = centred * rstd
    return v_hat * gain + bias, v_hat, rstd


def layer_norm_backward(dy, v_hat, rstd, gain):
    """Back-propagate `layer_norm`: returns (dv, dgain, dbias), the last two summed over rows.

        dv_hat = dy * gain
        dv = rstd * (dv_hat - mean(dv_hat) - v_hat * mean(dv_hat * v_hat))   (means over features)
    """
    dv_hat = dy * gain
    dv = rstd * (dv_hat - dv_hat.mean(axis=-1, keepdims=True)
                 - v_hat * (dv_hat * v_hat).mean(axis=-1, keepdims=True))
    return dv, (dy * v_hat).sum(axis=0), dy.sum(axis=0)


# ---- cells: LSTM family --------------------------------------------------------------------

def lstm_step(x, state, p):
    """One LSTM step (PyTorch's math), batch-major rows.

        i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)
        f = sigmoid(W_if x + b_if + W_hf h + b_hf)
        g = tanh   (W_ig x + b_ig + W_hg h + b_hg)
        o = sigmoid(W_io x + b_io + W_ho h + b_ho)
        c' = f * c + i * g
        m  = o * tanh(c')
        h' = W_hr m        (with proj_size; else h' = m)
    """
    h, c = state
    a = x @ p["weight_ih"].T + h @ p["weight_hh"].T
    a = a + p["bias_ih"] + p["bias_hh"]
    a_i, a_f, a_g, a_o = np.split(a, 4, axis=-1)
    i, f, g, o = sigmoid(a_i), sigmoid(a_f), np.tanh(a_g), sigmoid(a_o)
    c_new = f * c + i * g
    tanh_c = np.tanh(c_new)
    m = o * tanh_c
    w_hr = p.get("weight_hr")
    h_new = m @ w_hr.T if w_hr is not None else m
    saved = dict(x=x, h=h, c=c, i=i, f=f, g=g, o=o, tanh_c=tanh_c, m=m)
    return (h_new, c_new), saved


def lstm_step_backward(d_new, saved, p, grads):
    """Back-propagate one LSTM step.

    Given dL/dh' and dL/dc' (from later steps and outputs), with m = o*tanh(c'):

        dm  = dh' W_hr (projection; else dm = dh'),   dW_hr += dh'^T m
        do  = dm * tanh(c')
        dc  = dc' + dm * o * (1 - tanh(c')^2)
        di  = dc * g,  df = dc * c,  dg = dc * i,  dc_prev = dc * f
        da  = [di i(1-i), df f(1-f), dg (1-g^2), do o(1-o)]   (pre-activations)
        dW_ih += da^T x,  dW_hh += da^T h,  db_ih += sum_b da,  db_hh += sum_b da
        dx = da W_ih,  dh_prev = da W_hh
    """
    dh_new, dc_new = d_new
    s = saved
    w_hr = p.get("weight_hr")
    if w_hr is not None:
        grads["weight_hr"] += dh_new.T @ s["m"]
        dm = dh_new @ w_hr
    else:
        dm = dh_new
    do = dm * s["tanh_c"]
    dc = dc_new + dm * s["o"] * (1.0 - s["tanh_c"] ** 2)
    di, df, dg = dc * s["g"], dc * s["c"], dc * s["i"]
    dc_prev = dc * s["f"]
    da = np.concatenate([di * s["i"] * (1.0 - s["i"]), df * s["f"] * (1.0 - s["f"]),
                         dg * (1.0 - s["g"] ** 2), do * s["o"] * (1.0 - s["o"])], axis=-1)
    _accumulate_linear(grads, da, s["x"], da, s["h"])
    return da @ p["weight_ih"], (da @ p["weight_hh"], dc_prev)


def ln_lstm_step(x, state, p):
    """One LayerNorm-LSTM step (PyTorch benchmarks/fastrnns LayerNormLSTMCell, plus b_ih/b_hh).

        a  = LN_ih(W_ih x + b_ih) + LN_hh(W_hh h + b_hh)   (each LN over all 4H features)
        i, f, o = sigmoid(a_i, a_f, a_o),  g = tanh(a_g)
        c' = LN_c(f * c + i * g)                            (the normalised value is the state)
        h' = o * tanh(c')
        LN(v) = (v - mean v) / sqrt(var v + 1e-5) * gain + bias   (biased variance)
    """
    h, c = state
    gi = x @ p["weight_ih"].T + p["bias_ih"]
    gh = h @ p["weight_hh"].T + p["bias_hh"]
    ni, gi_hat, gi_rstd = layer_norm(gi, p["layernorm_ih_weight"], p["layernorm_ih_bias"])
    nh, gh_hat, gh_rstd = layer_norm(gh, p["layernorm_hh_weight"], p["layernorm_hh_bias"])
    a_i, a_f, a_g, a_o = np.split(ni + nh, 4, axis=-1)
    i, f, g, o = sigmoid(a_i), sigmoid(a_f), np.tanh(a_g), sigmoid(a_o)
    c_raw = f * c + i * g
    c_new, c_hat, c_rstd = layer_norm(c_raw, p["layernorm_c_weight"], p["layernorm_c_bias"])
    tanh_c = np.tanh(c_new)
    h_new = o * tanh_c
    saved = dict(x=x, h=h, c=c, i=i, f=f, g=g, o=o, tanh_c=tanh_c, gi_hat=gi_hat, gi_rstd=gi_rstd,
                 gh_hat=gh_hat, gh_rstd=gh_rstd, c_hat=c_hat, c_rstd=c_rstd)
    return (h_new, c_new), saved


def ln_lstm_step_backward(d_new, saved, p, grads):
    """Back-propagate one LayerNorm-LSTM step.

        do = dh' tanh(c'),  dc' += dh' o (1 - tanh(c')^2)
        dc_raw = LN_c backward(dc')          (dgain_c += sum dc' c_hat, dbias_c += sum dc')
        di = dc_raw g, df = dc_raw c, dg = dc_raw i, dc_prev = dc_raw f
        da = [di i(1-i), df f(1-f), dg (1-g^2), do o(1-o)]
        dgi = LN_ih backward(da), dgh = LN_hh backward(da)   (both norms see the same da)
        dW_ih += dgi^T x, db_ih += sum dgi, dW_hh += dgh^T h, db_hh += sum dgh
        dx = dgi W_ih,  dh_prev = dgh W_hh
    """
    dh_new, dc_new = d_new
    s = saved
    do = dh_new * s["tanh_c"]
    dc = dc_new + dh_new * s["o"] * (1.0 - s["tanh_c"] ** 2)
    dc_raw, dgain, dbias = layer_norm_backward(dc, s["c_hat"], s["c_rstd"], p["layernorm_c_weight"])
    grads["layernorm_c_weight"] += dgain
    grads["layernorm_c_bias"] += dbias
    di, df, dg = dc_raw * s["g"], dc_raw * s["c"], dc_raw * s["i"]
    dc_prev = dc_raw * s["f"]
    da = np.concatenate([di * s["i"] * (1.0 - s["i"]), df * s["f"] * (1.0 - s["f"]),
                         dg * (1.0 - s["g"] ** 2), do * s["o"] * (1.0 - s["o"])], axis=-1)
    dgi, dgain, dbias = layer_norm_backward(da, s["gi_hat"], s["gi_rstd"], p["layernorm_ih_weight"])
    grads["layernorm_ih_weight"] += dgain
    grads["layernorm_ih_bias"] += dbias
    dgh, dgain, dbias = layer_norm_backward(da, s["gh_hat"], s["gh_rstd"], p["layernorm_hh_weight"])
    grads["layernorm_hh_weight"] += dgain
    grads["layernorm_hh_bias"] += dbias
    _accumulate_linear(grads, dgi, s["x"], dgh, s["h"])
    return dgi @ p["weight_ih"], (dgh @ p["weight_hh"], dc_prev)


def peephole_lstm_step(x, state, p):
    """One peephole-LSTM step (Gers and Schmidhuber 2000; ONNX LSTM with P).

        i = sigmoid(W_ii x + b_ii + W_hi h + b_hi + p_i * c)
        f = sigmoid(W_if x + b_if + W_hf h + b_hf + p_f * c)
        g = tanh   (W_ig x + b_ig + W_hg h + b_hg)
        c' = f * c + i * g
        o = sigmoid(W_io x + b_io + W_ho h + b_ho + p_o * c')
        h' = o * tanh(c')
    with peephole = [p_i, p_f, p_o] (3H).
    """
    h, c = state
    a = x @ p["weight_ih"].T + h @ p["weight_hh"].T + p["bias_ih"] + p["bias_hh"]
    a_i, a_f, a_g, a_o = np.split(a, 4, axis=-1)
    p_i, p_f, p_o = np.split(p["peephole"], 3)
    i, f, g = sigmoid(a_i + p_i * c), sigmoid(a_f + p_f * c), np.tanh(a_g)
    c_new = f * c + i * g
    o = sigmoid(a_o + p_o * c_new)
    tanh_c = np.tanh(c_new)
    h_new = o * tanh_c
    saved = dict(x=x, h=h, c=c, c_new=c_new, i=i, f=f, g=g, o=o, tanh_c=tanh_c)
    return (h_new, c_new), saved


def peephole_lstm_step_backward(d_new, saved, p, grads):
    """Back-propagate one peephole-LSTM step.

        dz_o = dh' tanh(c') o (1-o)                      (z_* the gate pre-activations)
        dc'  = dc' + dh' o (1 - tanh(c')^2) + dz_o p_o,   dp_o += sum dz_o c'
        dz_i = dc' g i (1-i),  dz_f = dc' c f (1-f),  dz_g = dc' i (1-g^2)
        dc_prev = dc' f + dz_i p_i + dz_f p_f,  dp_i += sum dz_i c,  dp_f += sum dz_f c
        da = [dz_i, dz_f, dz_g, dz_o] -> weights and biases as the LSTM
    """
    dh_new, dc_new = d_new
    s = saved
    p_i, p_f, p_o = np.split(p["peephole"], 3)
    dz_o = dh_new * s["tanh_c"] * s["o"] * (1.0 - s["o"])
    dc = dc_new + dh_new * s["o"] * (1.0 - s["tanh_c"] ** 2) + dz_o * p_o
    dz_i = dc * s["g"] * s["i"] * (1.0 - s["i"])
    dz_f = dc * s["c"] * s["f"] * (1.0 - s["f"])
    dz_g = dc * s["i"] * (1.0 - s["g"] ** 2)
    dc_prev = dc * s["f"] + dz_i * p_i + dz_f * p_f
    grads["peephole"] += np.concatenate([(dz_i * s["c"]).sum(axis=0), (dz_f * s["c"]).sum(axis=0),
                                         (dz_o * s["c_new"]).sum(axis=0)])
    da = np.concatenate([dz_i, dz_f, dz_g, dz_o], axis=-1)
    _accumulate_linear(grads, da, s["x"], da, s["h"])
    return da @ p["weight_ih"], (da @ p["weight_hh"], dc_prev)


# ---- cells: GRU family ---------------------------------------------------------------------

def gru_step(x, state, p):
    """One GRU step (PyTorch's math: reset applied after the recurrent matmul).

        r  = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z  = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n  = tanh   (W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h
    """
    (h,) = state
    gi = x @ p["weight_ih"].T + p["bias_ih"]
    gh = h @ p["weight_hh"].T + p["bias_hh"]
    gi_r, gi_z, gi_n = np.split(gi, 3, axis=-1)
    gh_r, gh_z, gh_n = np.split(gh, 3, axis=-1)
    r = sigmoid(gi_r + gh_r)
    z = sigmoid(gi_z + gh_z)
    n = np.tanh(gi_n + r * gh_n)
    h_new = (1.0 - z) * n + z * h
    saved = dict(x=x, h=h, r=r, z=z, n=n, gh_n=gh_n)
    return (h_new,), saved


def gru_step_backward(d_new, saved, p, grads):
    """Back-propagate one GRU step.

    Given dL/dh', with the recurrent part of n written hn = W_hn h + b_hn:

        dn = dh' (1 - z),  dz = dh' (h - n),  dh_prev = dh' z + dgh W_hh
        da_n = dn (1 - n^2),  da_r = da_n * hn * r (1 - r),  da_z = dz z (1 - z)
        dgi = [da_r, da_z, da_n]          (input-side pre-activations)
        dgh = [da_r, da_z, da_n * r]      (recurrent-side pre-activations)
        dW_ih += dgi^T x,  db_ih += sum_b dgi,  dW_hh += dgh^T h,  db_hh += sum_b dgh
        dx = dgi W_ih
    """
    (dh_new,) = d_new
    s = saved
    dn = dh_new * (1.0 - s["z"])
    dz = dh_new * (s["h"] - s["n"])
    da_n = dn * (1.0 - s["n"] ** 2)
    da_r = da_n * s["gh_n"] * s["r"] * (1.0 - s["r"])
    da_z = dz * s["z"] * (1.0 - s["z"])
    dgi = np.concatenate([da_r, da_z, da_n], axis=-1)
    dgh = np.concatenate([da_r, da_z, da_n * s["r"]], axis=-1)
    _accumulate_linear(grads, dgi, s["x"], dgh, s["h"])
    return dgi @ p["weight_ih"], (dh_new * s["z"] + dgh @ p["weight_hh"],)


def gru_reset_before_step(x, state, p):
    """One reset-before GRU step (Cho et al. 2014; ONNX linear_before_reset=0, Keras reset_after=False).

        r  = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z  = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n  = tanh   (W_in x + b_in + W_hn (r * h) + b_hn)
        h' = (1 - z) * n + z * h
    """
    (h,) = state
    H = h.shape[-1]
    w_hh, b_hh = p["weight_hh"], p["bias_hh"]
    gi = x @ p["weight_ih"].T + p["bias_ih"]
    gi_r, gi_z, gi_n = np.split(gi, 3, axis=-1)
    gh_rz = h @ w_hh[:2 * H].T + b_hh[:2 * H]
    r = sigmoid(gi_r + gh_rz[:, :H])
    z = sigmoid(gi_z + gh_rz[:, H:])
    rh = r * h
    n = np.tanh(gi_n + rh @ w_hh[2 * H:].T + b_hh[2 * H:])
    h_new = (1.0 - z) * n + z * h
    saved = dict(x=x, h=h, r=r, z=z, n=n, rh=rh)
    return (h_new,), saved


def gru_reset_before_step_backward(d_new, saved, p, grads):
    """Back-propagate one reset-before GRU step.

        da_n = dh' (1 - z) (1 - n^2),  da_z = dh' (h - n) z (1 - z)
        d(rh) = da_n W_hn,  da_r = d(rh) h r (1 - r)
        dW_hh[r,z] += [da_r, da_z]^T h,  dW_hh[n] += da_n^T (r h),  db_hh += sum [da_r, da_z, da_n]
        dW_ih += dgi^T x,  db_ih += sum dgi,  dgi = [da_r, da_z, da_n],  dx = dgi W_ih
        dh_prev = dh' z + [da_r, da_z] W_hh[r,z] + d(rh) r
    """
    (dh_new,) = d_new
    s = saved
    H = s["h"].shape[-1]
    w_hh = p["weight_hh"]
    da_n = dh_new * (1.0 - s["z"]) * (1.0 - s["n"] ** 2)
    da_z = dh_new * (s["h"] - s["n"]) * s["z"] * (1.0 - s["z"])
    d_rh = da_n @ w_hh[2 * H:]
    da_r = d_rh * s["h"] * s["r"] * (1.0 - s["r"])
    da_rz = np.concatenate([da_r, da_z], axis=-1)
    dgi = np.concatenate([da_rz, da_n], axis=-1)
    grads["weight_ih"] += dgi.T @ s["x"]
    grads["bias_ih"] += dgi.sum(axis=0)
    grads["weight_hh"][:2 * H] += da_rz.T @ s["h"]
    grads["weight_hh"][2 * H:] += da_n.T @ s["rh"]
    grads["bias_hh"] += dgi.sum(axis=0)
    dh_prev = dh_new * s["z"] + da_rz @ w_hh[:2 * H] + d_rh * s["r"]
    return dgi @ p["weight_ih"], (dh_prev,)


def _accumulate_linear(grads, d_ih, x, d_hh, h):
    """dW_ih += d_ih^T x, db_ih += sum d_ih, dW_hh += d_hh^T h, db_hh += sum d_hh."""
    grads["weight_ih"] += d_ih.T @ x
    grads["weight_hh"] += d_hh.T @ h
    grads["bias_ih"] += d_ih.sum(axis=0)
    grads["bias_hh"] += d_hh.sum(axis=0)


