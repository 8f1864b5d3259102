"""The float64 NumPy reference: forward and backward (BPTT) for every cell in the catalogue.

Every implementation is checked against this module.  It follows PyTorch's math and
`nn.LSTM`/`nn.GRU` semantics exactly (docs/contract.md):

- multiple layers (layer k > 0 reads the concatenated outputs of layer k-1), both
  directions, `batch_first`, `bias=False`, initial states, LSTM `proj_size`;
- variable lengths with packed-sequence semantics: outputs past a sequence's length are
  zero, `h_n`/`c_n` hold the state at its last valid step, and the reverse direction
  runs over each sequence's valid part, reversed;
- `h_n`/`c_n` ordered layer-major, then direction: `(num_layers * num_directions, B, .)`.

Cells (`shared.cells` has their equations and parameter names): `lstm`, `gru`,
`ln_lstm`, `peephole_lstm` and `gru_reset_before` each have a step and a hand-written
step backward here.  A cell is a `CellStep` (step, step_backward) looked up by
`spec.cell`; the layer/direction/lengths driver below is shared by all of them, so
adding a cell never means editing the driver.

Your own cell: register its `shared.cells.CellDef`, then its NumPy step with
`register_cell_step(name, step)`.  Without a hand-written backward the reference
differentiates the step by the complex step method (`complex_step_backward`): exact to
machine precision in float64, provided the step is written with complex-safe NumPy
(arithmetic, `@`, `np.tanh`, `np.exp`, `np.sqrt`, `np.split`, `np.concatenate`, and this
module's `sigmoid`; not `np.abs`, `np.maximum`, comparisons on values, or `.real`).

Step signature.  `state` is a tuple: `(h, c)` for the "lstm" family, `(h,)` for "gru";
rows are sequences (batch-major, `x` is (B, in)).  `p` maps short parameter names to
this layer/direction's arrays: "weight_ih", "weight_hh", "bias_ih", "bias_hh" (zeros
when `spec.bias` is False, so a step never needs to test for them), "weight_hr" (with
proj_size) and each extra parameter's prefix (e.g. "peephole").

    plain step (user cells):     step(x, state, p) -> new_state
    hand-written pair:           step(x, state, p) -> (new_state, saved)
                                 step_backward(d_new_state, saved, p, grads) -> (dx, d_state)

`new_state[0]` is the step's output h'.  `step_backward` receives dL/d(new_state) (the
h' entry already includes the output's cotangent), accumulates parameter gradients into
`grads[short name]` in place, and returns dL/dx and dL/d(state).

Dropout: PyTorch applies dropout only between layers and only in training, drawing random
masks, so it cannot be reproduced deterministically.  `spec.dropout > 0` with
`num_layers > 1` raises `ValueError`; with one layer dropout has no effect in PyTorch
either, and the reference computes the same function.

API:
- `forward(spec, params, x, h0=None, c0=None, lengths=None) -> ForwardResult`
  (`.output`, `.h_n`, `.c_n` and the `.cache` that `backward` needs);
- `backward(spec, fwd, cotangents) -> dict` of gradients keyed "grad/x",
  "grad/h0", "grad/c0" (LSTM family), "grad/<param name>";
- `run_case(...)`: both, returning the dict of `shared.adapter.Adapter.run_case`;
- `register_cell_step`, `get_cell_step`, `complex_step_backward`, `sigmoid`, `layer_norm`;
- `check_gradients(spec)`: backward vs finite differences on a tiny random case (for new cells).

Internally everything runs time-major, (T, B, features).  Each direction walks steps
s = 0..T-1; `time_index[s, b]` is the time step that step s reads and writes for
sequence b (s for the forward direction, length_b - 1 - s for the reverse one) and
`valid[s, b]` says whether s < length_b.  On an invalid step the state is carried over
unchanged, which gives the packed-sequence semantics for both directions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .cells import CELL_DEFS, get_cell
from .params import check_params
from .spec import RNNSpec

__all__ = ["ForwardResult", "forward", "backward", "run_case", "CellStep", "register_cell_step",
           "get_cell_step", "complex_step_backward", "check_gradients", "COMPLEX_STEP", "sigmoid", "layer_norm",
           "layer_norm_backward", "LAYER_NORM_EPS", "lstm_step", "lstm_step_backward", "gru_step",
           "gru_step_backward", "ln_lstm_step", "ln_lstm_step_backward", "peephole_lstm_step",
           "peephole_lstm_step_backward", "gru_reset_before_step", "gru_reset_before_step_backward"]

LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, used by ln_lstm's three norms
COMPLEX_STEP = 1e-30  # imaginary step h: f(x + ih) = f(x) + ih f'(x) + O(h^2), no cancellation


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


# ---- the cell table and the generic (complex-step) gradient ------------------------------------

@dataclass(frozen=True)
class CellStep:
    """How the reference runs one cell: `step` and its `step_backward` (see the module docstring).

    `hand_written` is False when `step_backward` is the complex-step derivative of a plain step.
    """

    step: Callable
    step_backward: Callable
    hand_written: bool = True


_CELL_STEPS: dict[str, CellStep] = {}


def complex_step_backward(plain_step: Callable, h: float = COMPLEX_STEP) -> Callable:
    """A `step_backward` for `plain_step(x, state, p) -> new_state`, by the complex step method.

    For every input scalar u, Im(step(u + i h)) / h is the exact derivative (up to O(h^2),
    h = 1e-30: machine precision in float64) with no subtractive cancellation, provided
    the step is complex-analytic in its inputs (complex-safe NumPy; see module docstring).
    Rows of x and state are sequences, which a cell never mixes: one evaluation perturbs
    column j of every row at once and yields d/d(x[b, j]) for all b.  Each parameter
    scalar costs one evaluation: fine for the tiny sizes of tests and vectors, not for
    benchmarks.
    """
    def backward(d_new, saved, p, grads):
        x, state = saved

        def directional(outputs):
            """Per-row sum over outputs of cotangent * d(output)/d(perturbed input)."""
            return sum((d * (np.imag(o) / h)).sum(axis=-1) for d, o in zip(d_new, outputs))

        def column_grads(array, evaluate):
            out = np.zeros(array.shape)
            for j in range(array.shape[-1]):
                perturbed = array.astype(np.complex128)
                perturbed[:, j] += 1j * h
                out[:, j] = directional(evaluate(perturbed))
            return out

        dx = column_grads(x, lambda xc: plain_step(xc, state, p))
        d_state = tuple(
            column_grads(state[k], lambda sc, k=k: plain_step(x, state[:k] + (sc,) + state[k + 1:], p))
            for k in range(len(state)))
        for name, g in grads.items():
            value = p[name]
            for idx in np.ndindex(value.shape):
                perturbed = value.astype(np.complex128)
                perturbed[idx] += 1j * h
                g[idx] += directional(plain_step(x, state, {**p, name: perturbed})).sum()
        return dx, d_state

    return backward


def register_cell_step(name: str, step: Callable, step_backward: Callable | None = None) -> CellStep:
    """Teach the reference a cell already in the catalogue (`shared.cells.register_cell`).

    With `step_backward`, `step(x, state, p)` returns `(new_state, saved)` and the pair is
    used as is.  Without it, `step(x, state, p)` returns `new_state` only and gradients come
    from `complex_step_backward(step)`.  Re-registering the same functions is a no-op;
    different ones under a taken name raise `ValueError`.
    """
    if name not in CELL_DEFS:
        raise ValueError(f"cell {name!r} is not in the catalogue; register its CellDef first with "
                         f"shared.cells.register_cell (known cells: {tuple(CELL_DEFS)})")
    if not callable(step) or (step_backward is not None and not callable(step_backward)):
        raise TypeError(f"step and step_backward must be callables for cell {name!r}")
    if step_backward is None:
        def saving_step(x, state, p, _plain=step):
            return tuple(_plain(x, state, p)), (x, tuple(state))
        saving_step.plain = step
        entry = CellStep(saving_step, complex_step_backward(step), hand_written=False)
    else:
        entry = CellStep(step, step_backward)
    old = _CELL_STEPS.get(name)
    if old is not None:
        same = (getattr(old.step, "plain", old.step) is getattr(entry.step, "plain", entry.step)
                and old.hand_written == entry.hand_written
                and (not entry.hand_written or old.step_backward is entry.step_backward))
        if not same:
            raise ValueError(f"a different reference step is already registered for cell {name!r}")
        return old
    _CELL_STEPS[name] = entry
    return entry


def get_cell_step(name: str) -> CellStep:
    """The `CellStep` of a cell; a clear error for cells without a NumPy step."""
    get_cell(name)  # unknown names: the catalogue's error, listing the known cells
    try:
        return _CELL_STEPS[name]
    except KeyError:
        raise ValueError(f"cell {name!r} has no NumPy reference step; add one with "
                         f"shared.reference.register_cell_step({name!r}, step)") from None


register_cell_step("lstm", lstm_step, lstm_step_backward)
register_cell_step("gru", gru_step, gru_step_backward)
register_cell_step("ln_lstm", ln_lstm_step, ln_lstm_step_backward)
register_cell_step("peephole_lstm", peephole_lstm_step, peephole_lstm_step_backward)
register_cell_step("gru_reset_before", gru_reset_before_step, gru_reset_before_step_backward)


# ---- input validation --------------------------------------------------------------------

def _as_float64(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric array, got dtype {array.dtype}")
    return array.astype(np.float64)


def _check_inputs(spec, params, x, h0, c0, lengths):
    """Validate and convert; returns (params, x_time_major, h0, c0, lengths) in float64/int64."""
    if not isinstance(spec, RNNSpec):
        raise TypeError(f"spec must be an RNNSpec, got {type(spec).__name__}")
    if spec.dropout > 0 and spec.num_layers > 1:
        raise ValueError(
            f"dropout={spec.dropout} with num_layers={spec.num_layers}: the reference is "
            "deterministic and does not implement dropout between layers; use dropout=0")
    check_params(spec, params)
    params = {name: _as_float64(f"params[{name!r}]", params[name]) for name in spec.param_shapes()}
    x = _as_float64("x", x)
    layout = "(B, T, input_size)" if spec.batch_first else "(T, B, input_size)"
    if x.ndim != 3:
        raise ValueError(f"x must have rank 3 {layout}, got shape {x.shape}")
    if x.shape[2] != spec.input_size:
        raise ValueError(f"x has feature size {x.shape[2]}, expected input_size={spec.input_size}")
    if spec.batch_first:
        x = x.transpose(1, 0, 2)
    T, B = x.shape[:2]
    if T < 1 or B < 1:
        raise ValueError(f"x must hold at least one time step and one sequence, got shape {x.shape}")
    shapes = spec.state_shapes(B)
    if spec.family == "gru" and c0 is not None:
        raise ValueError(f"c0 is only for LSTM-family cells; cell={spec.cell!r} is a GRU-family cell "
                         "and a GRU has no cell state")
    if spec.family == "lstm" and (h0 is None) != (c0 is None):
        raise ValueError(f"for an LSTM-family cell ({spec.cell!r}), give h0 and c0 together or neither")
    if h0 is not None:
        h0 = _as_float64("h0", h0)
        if h0.shape != shapes["h"]:
            raise ValueError(f"h0 has shape {h0.shape}, expected {shapes['h']} "
                             "(num_layers * num_directions, B, proj_size or hidden_size)")
    if c0 is not None:
        c0 = _as_float64("c0", c0)
        if c0.shape != shapes["c"]:
            raise ValueError(f"c0 has shape {c0.shape}, expected {shapes['c']} "
                             "(num_layers * num_directions, B, hidden_size)")
    if lengths is not None:
        raw = np.asarray(lengths)
        if not np.issubdtype(raw.dtype, np.integer):
            raise TypeError(f"lengths must be an integer array, got dtype {raw.dtype}")
        if raw.shape != (B,):
            raise ValueError(f"lengths must have shape (B,) = ({B},), got {raw.shape}")
        if raw.min() < 1 or raw.max() > T:
            raise ValueError(f"lengths must be in [1, T] = [1, {T}], got {raw.tolist()}")
        lengths = raw.astype(np.int64)
    return params, x, h0, c0, lengths


# ---- the layered, bidirectional driver (shared by every cell) --------------------------------

def _steps(direction: int, T: int, lengths: np.ndarray):
    """(time_index, valid), both (T, B): which time step step s touches, and whether it exists."""
    s = np.arange(T)[:, None]
    valid = s < lengths[None, :]
    if direction == 0:
        time_index = np.broadcast_to(s, valid.shape)
    else:
        time_index = np.where(valid, lengths[None, :] - 1 - s, 0)
    return np.ascontiguousarray(time_index), valid


def _short_names(spec: RNNSpec, layer: int, direction: int) -> dict[str, str]:
    """Short name ("weight_ih", "peephole", ...) -> canonical name ("weight_ih_l0_reverse", ...)."""
    sfx = spec.suffix(layer, direction)
    names = {"weight_ih": f"weight_ih_{sfx}", "weight_hh": f"weight_hh_{sfx}"}
    if spec.bias:
        names.update(bias_ih=f"bias_ih_{sfx}", bias_hh=f"bias_hh_{sfx}")
    if spec.proj_size:
        names["weight_hr"] = f"weight_hr_{sfx}"
    for extra in spec.cell_def.extra_params:
        names[extra.prefix] = f"{extra.prefix}_{sfx}"
    return names


def _layer_params(spec: RNNSpec, params: Mapping, layer: int, direction: int, arrays: Mapping | None = None):
    """(p, names): the step's parameter dict (zero biases when spec.bias is False) and its names.

    With `arrays` (a dict keyed like `params`, e.g. gradient accumulators) the values are
    taken from it instead, and the absent biases get scratch zeros.
    """
    names = _short_names(spec, layer, direction)
    source = params if arrays is None else arrays
    p = {short: source[full] for short, full in names.items()}
    if not spec.bias:
        GH = spec.num_gates * spec.hidden_size
        p["bias_ih"], p["bias_hh"] = np.zeros(GH), np.zeros(GH)
    return p


@dataclass
class ForwardResult:
    """Outputs in the spec's layout plus what `backward` needs (`cache`, opaque)."""

    output: np.ndarray
    h_n: np.ndarray
    c_n: np.ndarray | None
    cache: dict = field(repr=False)


def forward(spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
            h0: np.ndarray | None = None, c0: np.ndarray | None = None,
            lengths: np.ndarray | None = None) -> ForwardResult:
    """Run the RNN described by `spec` in float64; see the module docstring for semantics."""
    params, x, h0, c0, lengths_in = _check_inputs(spec, params, x, h0, c0, lengths)
    cell = get_cell_step(spec.cell)
    T, B = x.shape[:2]
    lengths = lengths_in if lengths_in is not None else np.full(B, T, dtype=np.int64)
    shapes = spec.state_shapes(B)
    has_c = spec.family == "lstm"
    initial = [h0 if h0 is not None else np.zeros(shapes["h"])]
    if has_c:
        initial.append(c0 if c0 is not None else np.zeros(shapes["c"]))
    final = [np.zeros(shapes["h"])] + ([np.zeros(shapes["c"])] if has_c else [])
    H_out = spec.output_hidden_size
    steps = [_steps(d, T, lengths) for d in range(spec.num_directions)]
    batch = np.arange(B)
    layer_input = x
    saved_steps = {}  # (layer, direction) -> list of per-step saved values
    layer_inputs = []
    for layer in range(spec.num_layers):
        layer_inputs.append(layer_input)
        layer_output = np.zeros((T, B, spec.num_directions * H_out))
        for direction in range(spec.num_directions):
            k = layer * spec.num_directions + direction
            p = _layer_params(spec, params, layer, direction)
            time_index, valid = steps[direction]
            state = tuple(s[k] for s in initial)
            per_step = []
            out = layer_output[..., direction * H_out:(direction + 1) * H_out]
            for s in range(T):
                x_s = layer_input[time_index[s], batch]
                keep = valid[s][:, None]
                new_state, saved = cell.step(x_s, state, p)
                state = tuple(np.where(keep, new, old) for new, old in zip(new_state, state))
                # Invalid steps write to time_index 0 a value masked to zero; that slot
                # belongs to sequence b only when it is valid, so write valid rows only.
                rows = batch[valid[s]]
                out[time_index[s, rows], rows] = new_state[0][rows]
                per_step.append(saved)
            for target, value in zip(final, state):
                target[k] = value
            saved_steps[layer, direction] = per_step
        layer_input = layer_output
    output = layer_input.transpose(1, 0, 2) if spec.batch_first else layer_input
    cache = dict(params=params, steps=steps, saved=saved_steps, layer_inputs=layer_inputs,
                 T=T, B=B)
    return ForwardResult(output=np.ascontiguousarray(output), h_n=final[0],
                         c_n=final[1] if has_c else None, cache=cache)


def _check_cotangents(spec: RNNSpec, fwd: ForwardResult, cotangents: Mapping) -> dict:
    wanted = {"output": fwd.output, "h_n": fwd.h_n}
    if spec.family == "lstm":
        wanted["c_n"] = fwd.c_n
    unexpected = [k for k in cotangents if k not in wanted]
    missing = [k for k in wanted if k not in cotangents]
    if unexpected or missing:
        raise ValueError(f"cotangents must have exactly the keys {sorted(wanted)}; "
                         f"missing {missing}, unexpected {unexpected}")
    out = {}
    for key, value in wanted.items():
        cot = _as_float64(f"cotangents[{key!r}]", cotangents[key])
        if cot.shape != value.shape:
            raise ValueError(f"cotangents[{key!r}] has shape {cot.shape}, expected {value.shape}")
        out[key] = cot
    return out


def backward(spec: RNNSpec, fwd: ForwardResult, cotangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Gradients of L = sum(cot_output*output) + sum(cot_h_n*h_n) [+ sum(cot_c_n*c_n)].

    Returns "grad/x" (spec layout), "grad/h0", "grad/c0" (LSTM family) and "grad/<param
    name>" for every canonical parameter, as float64 arrays.  Back-propagates layer by
    layer, last layer first; within a direction, step s = T-1 .. 0 (BPTT).
    """
    cell = get_cell_step(spec.cell)
    cot = _check_cotangents(spec, fwd, cotangents)
    cache = fwd.cache
    params, T, B = cache["params"], cache["T"], cache["B"]
    has_c = spec.family == "lstm"
    H_out = spec.output_hidden_size
    batch = np.arange(B)
    grads = {name: np.zeros_like(value) for name, value in params.items()}
    d_initial = [np.zeros_like(fwd.h_n)] + ([np.zeros_like(fwd.c_n)] if has_c else [])
    d_final = [cot["h_n"]] + ([cot["c_n"]] if has_c else [])
    d_layer_output = cot["output"].transpose(1, 0, 2) if spec.batch_first else cot["output"]
    for layer in reversed(range(spec.num_layers)):
        layer_input = cache["layer_inputs"][layer]
        d_layer_input = np.zeros_like(layer_input)
        for direction in range(spec.num_directions):
            k = layer * spec.num_directions + direction
            p = _layer_params(spec, params, layer, direction)
            g = _layer_params(spec, params, layer, direction, arrays=grads)  # views into grads
            time_index, valid = cache["steps"][direction]
            d_out = d_layer_output[..., direction * H_out:(direction + 1) * H_out]
            d_state = [d[k].copy() for d in d_final]
            per_step = cache["saved"][layer, direction]
            for s in reversed(range(T)):
                keep = valid[s][:, None]
                # On an invalid step the state was carried over: the gradient passes
                # through untouched and the cell receives none.
                d_new = [np.where(keep, d_state[0] + d_out[time_index[s], batch], 0.0)]
                d_new += [np.where(keep, d, 0.0) for d in d_state[1:]]
                dx, d_prev = cell.step_backward(tuple(d_new), per_step[s], p, g)
                d_state = [np.where(keep, prev, d) for prev, d in zip(d_prev, d_state)]
                # (time_index[s, b], b) pairs are distinct within a step; invalid rows add 0.
                d_layer_input[time_index[s], batch] += dx
            for target, value in zip(d_initial, d_state):
                target[k] = value
        d_layer_output = d_layer_input
    d_x = d_layer_output.transpose(1, 0, 2) if spec.batch_first else d_layer_output
    result = {"grad/x": np.ascontiguousarray(d_x), "grad/h0": d_initial[0]}
    if has_c:
        result["grad/c0"] = d_initial[1]
    result.update({f"grad/{name}": g for name, g in grads.items()})
    return result


def run_case(spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
             h0: np.ndarray | None = None, c0: np.ndarray | None = None,
             lengths: np.ndarray | None = None,
             cotangents: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Forward (and backward with cotangents), returning `Adapter.run_case`'s dict.

    Keys: "output", "h_n", "c_n" (LSTM family); with cotangents also "grad/x", "grad/h0"
    and "grad/c0" (only when h0/c0 were given) and "grad/<param name>" for every parameter.
    """
    fwd = forward(spec, params, x, h0, c0, lengths)
    result = {"output": fwd.output, "h_n": fwd.h_n}
    if spec.family == "lstm":
        result["c_n"] = fwd.c_n
    if cotangents is not None:
        grads = backward(spec, fwd, cotangents)
        if h0 is None:
            grads.pop("grad/h0")
        if c0 is None:
            grads.pop("grad/c0", None)
        result.update(grads)
    return result


def check_gradients(spec: RNNSpec, *, seq_len: int = 3, batch: int = 2, seed: int = 0,
                    eps: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-7) -> dict[str, float]:
    """Compare `backward` with central finite differences on a small random case; raise if off.

    For checking a newly registered cell (above all one differentiated by the complex step,
    whose result is silently wrong when the step is not complex-safe).  Draws PyTorch-style
    parameters (extras moved off their init by 0.3 N(0, 1)), standard-normal x, h0 (c0)
    and cotangents from `default_rng(seed)`, and uses the lengths (seq_len, 1, ...) so
    the packed-sequence paths run too.  Returns {gradient key: max abs error}; raises
    `AssertionError` naming every key beyond `atol + rtol * |grad|`.  Costs two forwards
    per scalar input: keep the spec tiny.
    """
    from .params import init_params

    rng = np.random.default_rng(seed)
    params = init_params(spec, rng)
    extras = {f"{e.prefix}_{spec.suffix(l, d)}" for e in spec.cell_def.extra_params
              for l, d in spec.layers_and_directions()}
    for name in extras:
        params[name] = params[name] + 0.3 * rng.standard_normal(params[name].shape)
    x_shape = (batch, seq_len, spec.input_size) if spec.batch_first else (seq_len, batch, spec.input_size)
    shapes = spec.state_shapes(batch)
    inputs = {"x": rng.standard_normal(x_shape), "h0": rng.standard_normal(shapes["h"])}
    if spec.family == "lstm":
        inputs["c0"] = rng.standard_normal(shapes["c"])
    lengths = np.array([seq_len] + [1 + b % seq_len for b in range(1, batch)], dtype=np.int64)
    cot = {"output": rng.standard_normal(x_shape[:2] + (spec.output_size,)),
           "h_n": rng.standard_normal(shapes["h"])}
    if spec.family == "lstm":
        cot["c_n"] = rng.standard_normal(shapes["c"])

    def loss():
        result = run_case(spec, params, lengths=lengths, **inputs)
        return sum(float(np.sum(result[k] * cot[k])) for k in cot)

    grads = run_case(spec, params, lengths=lengths, cotangents=cot, **inputs)
    holders = [(f"grad/{k}", inputs, k) for k in inputs] + [(f"grad/{k}", params, k) for k in params]
    errors, bad = {}, []
    for key, holder, name in holders:
        array = holder[name]
        numeric = np.zeros_like(array)
        for idx in np.ndindex(array.shape):
            original = array[idx]
            array[idx] = original + eps
            plus = loss()
            array[idx] = original - eps
            minus = loss()
            array[idx] = original
            numeric[idx] = (plus - minus) / (2 * eps)
        diff = np.abs(grads[key] - numeric)
        errors[key] = float(diff.max()) if diff.size else 0.0
        if np.any(diff > atol + rtol * np.abs(numeric)):
            bad.append(f"{key} (max error {errors[key]:.3g})")
    if bad:
        raise AssertionError(f"cell {spec.cell!r}: gradients disagree with finite differences: {', '.join(bad)}; "
                             "a step differentiated by the complex step must be complex-safe (no np.abs, "
                             "np.maximum, value comparisons or .real; use reference.sigmoid)")
    return errors
