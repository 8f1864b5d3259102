"""The float64 NumPy reference: forward and hand-written backward (BPTT) for LSTM and GRU.

Every implementation is checked against this module.  It follows PyTorch's math and
`nn.LSTM`/`nn.GRU` semantics exactly (DESIGN.md section 3):

- multiple layers (layer k > 0 reads the concatenated outputs of layer k-1), both
  directions, `batch_first`, `bias=False`, initial states, LSTM `proj_size`;
- variable lengths with packed-sequence semantics: outputs past a sequence's length are
  zero, `h_n`/`c_n` hold the state at its last valid step, and the reverse direction
  runs over each sequence's valid part, reversed;
- `h_n`/`c_n` ordered layer-major, then direction: `(num_layers * num_directions, B, .)`.

Dropout: PyTorch applies dropout only between layers and only in training, drawing random
masks, so it cannot be reproduced deterministically.  `spec.dropout > 0` with
`num_layers > 1` raises `ValueError`; with one layer dropout has no effect in PyTorch
either, and the reference computes the same function.

API:
- `forward(spec, params, x, h0=None, c0=None, lengths=None) -> ForwardResult`
  (`.output`, `.h_n`, `.c_n` and the `.cache` that `backward` needs);
- `backward(spec, params, fwd, cotangents) -> dict` of gradients keyed "grad/x",
  "grad/h0", "grad/c0" (LSTM), "grad/<param name>";
- `run_case(...)`: both, returning the dict of `shared.adapter.Adapter.run_case`.

Internally everything runs time-major, (T, B, features).  Each direction walks steps
s = 0..T-1; `time_index[s, b]` is the time step that step s reads and writes for
sequence b (s for the forward direction, length_b - 1 - s for the reverse one) and
`valid[s, b]` says whether s < length_b.  On an invalid step the state is carried over
unchanged, which gives the packed-sequence semantics for both directions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .params import check_params
from .spec import RNNSpec

__all__ = ["ForwardResult", "forward", "backward", "run_case", "lstm_cell", "gru_cell",
           "lstm_cell_backward", "gru_cell_backward", "sigmoid"]


def sigmoid(a: np.ndarray) -> np.ndarray:
    """Logistic function, written to avoid overflow warnings for large |a|."""
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# ---- cells -----------------------------------------------------------------------------

def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    """One LSTM step (PyTorch's math), batch-major rows.

        i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)
        f = sigmoid(W_if x + b_if + W_hf h + b_hf)
        g = tanh   (W_ig x + b_ig + W_hg h + b_hg)
        o = sigmoid(W_io x + b_io + W_ho h + b_ho)
        c' = f * c + i * g
        m  = o * tanh(c')
        h' = W_hr m        (with proj_size; else h' = m)

    Returns (h', c', saved) where `saved` holds what `lstm_cell_backward` needs.
    """
    a = x @ w_ih.T + h @ w_hh.T
    if b_ih is not None:
        a = a + b_ih + b_hh
    a_i, a_f, a_g, a_o = np.split(a, 4, axis=-1)
    i, f, g, o = sigmoid(a_i), sigmoid(a_f), np.tanh(a_g), sigmoid(a_o)
    c_new = f * c + i * g
    tanh_c = np.tanh(c_new)
    m = o * tanh_c
    h_new = m @ w_hr.T if w_hr is not None else m
    saved = dict(x=x, h=h, c=c, i=i, f=f, g=g, o=o, tanh_c=tanh_c, m=m)
    return h_new, c_new, saved


def lstm_cell_backward(dh_new, dc_new, saved, w_ih, w_hh, w_hr, grads, names):
    """Back-propagate one LSTM step.

    Given dL/dh' and dL/dc' (from later steps and outputs), with m = o*tanh(c'):

        dm  = dh' W_hr (projection; else dm = dh'),   dW_hr += dh'^T m
        do  = dm * tanh(c')
        dc  = dc' + dm * o * (1 - tanh(c')^2)
        di  = dc * g,  df = dc * c,  dg = dc * i,  dc_prev = dc * f
        da  = [di i(1-i), df f(1-f), dg (1-g^2), do o(1-o)]   (pre-activations)
        dW_ih += da^T x,  dW_hh += da^T h,  db_ih += sum_b da,  db_hh += sum_b da
        dx = da W_ih,  dh_prev = da W_hh

    Accumulates parameter gradients into `grads[names[...]]`; returns (dx, dh_prev, dc_prev).
    """
    s = saved
    if w_hr is not None:
        grads[names["weight_hr"]] += dh_new.T @ s["m"]
        dm = dh_new @ w_hr
    else:
        dm = dh_new
    do = dm * s["tanh_c"]
    dc = dc_new + dm * s["o"] * (1.0 - s["tanh_c"] ** 2)
    di, df, dg = dc * s["g"], dc * s["c"], dc * s["i"]
    dc_prev = dc * s["f"]
    da = np.concatenate([di * s["i"] * (1.0 - s["i"]), df * s["f"] * (1.0 - s["f"]),
                         dg * (1.0 - s["g"] ** 2), do * s["o"] * (1.0 - s["o"])], axis=-1)
    grads[names["weight_ih"]] += da.T @ s["x"]
    grads[names["weight_hh"]] += da.T @ s["h"]
    if "bias_ih" in names:
        db = da.sum(axis=0)
        grads[names["bias_ih"]] += db
        grads[names["bias_hh"]] += db
    return da @ w_ih, da @ w_hh, dc_prev


def gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    """One GRU step (PyTorch's math: reset applied after the recurrent matmul).

        r  = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z  = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n  = tanh   (W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h

    Returns (h', saved) where `saved` holds what `gru_cell_backward` needs.
    """
    gi = x @ w_ih.T
    gh = h @ w_hh.T
    if b_ih is not None:
        gi = gi + b_ih
        gh = gh + b_hh
    gi_r, gi_z, gi_n = np.split(gi, 3, axis=-1)
    gh_r, gh_z, gh_n = np.split(gh, 3, axis=-1)
    r = sigmoid(gi_r + gh_r)
    z = sigmoid(gi_z + gh_z)
    n = np.tanh(gi_n + r * gh_n)
    h_new = (1.0 - z) * n + z * h
    saved = dict(x=x, h=h, r=r, z=z, n=n, gh_n=gh_n)
    return h_new, saved


def gru_cell_backward(dh_new, saved, w_ih, w_hh, grads, names):
    """Back-propagate one GRU step.

    Given dL/dh', with the recurrent part of n written hn = W_hn h + b_hn:

        dn = dh' (1 - z),  dz = dh' (h - n),  dh_prev = dh' z + dgh W_hh
        da_n = dn (1 - n^2),  da_r = da_n * hn * r (1 - r),  da_z = dz z (1 - z)
        dgi = [da_r, da_z, da_n]          (input-side pre-activations)
        dgh = [da_r, da_z, da_n * r]      (recurrent-side pre-activations)
        dW_ih += dgi^T x,  db_ih += sum_b dgi,  dW_hh += dgh^T h,  db_hh += sum_b dgh
        dx = dgi W_ih

    Accumulates parameter gradients into `grads[names[...]]`; returns (dx, dh_prev).
    """
    s = saved
    dn = dh_new * (1.0 - s["z"])
    dz = dh_new * (s["h"] - s["n"])
    da_n = dn * (1.0 - s["n"] ** 2)
    da_r = da_n * s["gh_n"] * s["r"] * (1.0 - s["r"])
    da_z = dz * s["z"] * (1.0 - s["z"])
    dgi = np.concatenate([da_r, da_z, da_n], axis=-1)
    dgh = np.concatenate([da_r, da_z, da_n * s["r"]], axis=-1)
    grads[names["weight_ih"]] += dgi.T @ s["x"]
    grads[names["weight_hh"]] += dgh.T @ s["h"]
    if "bias_ih" in names:
        grads[names["bias_ih"]] += dgi.sum(axis=0)
        grads[names["bias_hh"]] += dgh.sum(axis=0)
    return dgi @ w_ih, dh_new * s["z"] + dgh @ w_hh


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
    if spec.cell == "gru" and c0 is not None:
        raise ValueError("c0 is only for cell='lstm'; a GRU has no cell state")
    if spec.cell == "lstm" and (h0 is None) != (c0 is None):
        raise ValueError("for an LSTM, give h0 and c0 together or neither")
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


# ---- the layered, bidirectional driver ---------------------------------------------------

def _steps(direction: int, T: int, lengths: np.ndarray):
    """(time_index, valid), both (T, B): which time step step s touches, and whether it exists."""
    s = np.arange(T)[:, None]
    valid = s < lengths[None, :]
    if direction == 0:
        time_index = np.broadcast_to(s, valid.shape)
    else:
        time_index = np.where(valid, lengths[None, :] - 1 - s, 0)
    return np.ascontiguousarray(time_index), valid


def _names(spec: RNNSpec, layer: int, direction: int) -> dict[str, str]:
    """Short name ("weight_ih", ...) -> canonical name ("weight_ih_l0_reverse", ...)."""
    sfx = spec.suffix(layer, direction)
    names = {"weight_ih": f"weight_ih_{sfx}", "weight_hh": f"weight_hh_{sfx}"}
    if spec.bias:
        names.update(bias_ih=f"bias_ih_{sfx}", bias_hh=f"bias_hh_{sfx}")
    if spec.proj_size:
        names["weight_hr"] = f"weight_hr_{sfx}"
    return names


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
    T, B = x.shape[:2]
    lengths = lengths_in if lengths_in is not None else np.full(B, T, dtype=np.int64)
    shapes = spec.state_shapes(B)
    is_lstm = spec.cell == "lstm"
    h0_all = h0 if h0 is not None else np.zeros(shapes["h"])
    c0_all = (c0 if c0 is not None else np.zeros(shapes["c"])) if is_lstm else None
    H_out, H = spec.output_hidden_size, spec.hidden_size
    h_n = np.zeros(shapes["h"])
    c_n = np.zeros(shapes["c"]) if is_lstm else None
    steps = [_steps(d, T, lengths) for d in range(spec.num_directions)]
    batch = np.arange(B)
    layer_input = x
    saved_steps = {}  # (layer, direction) -> list of per-step saved dicts
    layer_inputs = []
    for layer in range(spec.num_layers):
        layer_inputs.append(layer_input)
        layer_output = np.zeros((T, B, spec.num_directions * H_out))
        for direction in range(spec.num_directions):
            k = layer * spec.num_directions + direction
            n = _names(spec, layer, direction)
            w_ih, w_hh = params[n["weight_ih"]], params[n["weight_hh"]]
            b_ih, b_hh = (params[n["bias_ih"]], params[n["bias_hh"]]) if spec.bias else (None, None)
            w_hr = params[n["weight_hr"]] if spec.proj_size else None
            time_index, valid = steps[direction]
            h = h0_all[k]
            c = c0_all[k] if is_lstm else None
            per_step = []
            out = layer_output[..., direction * H_out:(direction + 1) * H_out]
            for s in range(T):
                x_s = layer_input[time_index[s], batch]
                keep = valid[s][:, None]
                if is_lstm:
                    h_new, c_new, saved = lstm_cell(x_s, h, c, w_ih, w_hh, b_ih, b_hh, w_hr)
                    c = np.where(keep, c_new, c)
                else:
                    h_new, saved = gru_cell(x_s, h, w_ih, w_hh, b_ih, b_hh)
                h = np.where(keep, h_new, h)
                # Invalid steps write to time_index 0 a value masked to zero; that slot
                # belongs to sequence b only when it is valid, so write valid rows only.
                rows = batch[valid[s]]
                out[time_index[s, rows], rows] = h_new[rows]
                per_step.append(saved)
            h_n[k] = h
            if is_lstm:
                c_n[k] = c
            saved_steps[layer, direction] = per_step
        layer_input = layer_output
    output = layer_input.transpose(1, 0, 2) if spec.batch_first else layer_input
    cache = dict(params=params, steps=steps, saved=saved_steps, layer_inputs=layer_inputs,
                 T=T, B=B)
    return ForwardResult(output=np.ascontiguousarray(output), h_n=h_n, c_n=c_n, cache=cache)


def _check_cotangents(spec: RNNSpec, fwd: ForwardResult, cotangents: Mapping) -> dict:
    wanted = {"output": fwd.output, "h_n": fwd.h_n}
    if spec.cell == "lstm":
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

    Returns "grad/x" (spec layout), "grad/h0", "grad/c0" (LSTM) and "grad/<param name>"
    for every canonical parameter, as float64 arrays.  Back-propagates layer by layer,
    last layer first; within a direction, step s = T-1 .. 0 (BPTT).
    """
    cot = _check_cotangents(spec, fwd, cotangents)
    cache = fwd.cache
    params, T, B = cache["params"], cache["T"], cache["B"]
    is_lstm = spec.cell == "lstm"
    H_out = spec.output_hidden_size
    batch = np.arange(B)
    grads = {name: np.zeros_like(value) for name, value in params.items()}
    d_h0 = np.zeros_like(fwd.h_n)
    d_c0 = np.zeros_like(fwd.c_n) if is_lstm else None
    d_layer_output = cot["output"].transpose(1, 0, 2) if spec.batch_first else cot["output"]
    for layer in reversed(range(spec.num_layers)):
        layer_input = cache["layer_inputs"][layer]
        d_layer_input = np.zeros_like(layer_input)
        for direction in range(spec.num_directions):
            k = layer * spec.num_directions + direction
            n = _names(spec, layer, direction)
            w_ih, w_hh = params[n["weight_ih"]], params[n["weight_hh"]]
            w_hr = params[n["weight_hr"]] if spec.proj_size else None
            time_index, valid = cache["steps"][direction]
            d_out = d_layer_output[..., direction * H_out:(direction + 1) * H_out]
            dh = cot["h_n"][k].copy()
            dc = cot["c_n"][k].copy() if is_lstm else None
            per_step = cache["saved"][layer, direction]
            for s in reversed(range(T)):
                keep = valid[s][:, None]
                # On an invalid step h (and c) were carried over: the gradient passes
                # through untouched and the cell receives none.
                dh_new = np.where(keep, dh + d_out[time_index[s], batch], 0.0)
                if is_lstm:
                    dc_new = np.where(keep, dc, 0.0)
                    dx, dh_prev, dc_prev = lstm_cell_backward(dh_new, dc_new, per_step[s], w_ih, w_hh,
                                                              w_hr, grads, n)
                    dc = np.where(keep, dc_prev, dc)
                else:
                    dx, dh_prev = gru_cell_backward(dh_new, per_step[s], w_ih, w_hh, grads, n)
                dh = np.where(keep, dh_prev, dh)
                # (time_index[s, b], b) pairs are distinct within a step; invalid rows add 0.
                d_layer_input[time_index[s], batch] += dx
            d_h0[k] = dh
            if is_lstm:
                d_c0[k] = dc
        d_layer_output = d_layer_input
    d_x = d_layer_output.transpose(1, 0, 2) if spec.batch_first else d_layer_output
    result = {"grad/x": np.ascontiguousarray(d_x), "grad/h0": d_h0}
    if is_lstm:
        result["grad/c0"] = d_c0
    result.update({f"grad/{name}": g for name, g in grads.items()})
    return result


def run_case(spec: RNNSpec, params: Mapping[str, np.ndarray], x: np.ndarray,
             h0: np.ndarray | None = None, c0: np.ndarray | None = None,
             lengths: np.ndarray | None = None,
             cotangents: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Forward (and backward with cotangents), returning `Adapter.run_case`'s dict.

    Keys: "output", "h_n", "c_n" (LSTM); with cotangents also "grad/x", "grad/h0" and
    "grad/c0" (only when h0/c0 were given) and "grad/<param name>" for every parameter.
    """
    fwd = forward(spec, params, x, h0, c0, lengths)
    result = {"output": fwd.output, "h_n": fwd.h_n}
    if spec.cell == "lstm":
        result["c_n"] = fwd.c_n
    if cotangents is not None:
        grads = backward(spec, fwd, cotangents)
        if h0 is None:
            grads.pop("grad/h0")
        if c0 is None:
            grads.pop("grad/c0", None)
        result.update(grads)
    return result
