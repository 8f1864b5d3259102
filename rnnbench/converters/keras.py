"""Canonical parameters <-> Keras 3 `LSTM` / `GRU` weights, per layer and direction.

LSTM (`keras.layers.LSTM(H, use_bias=spec.bias)`): `kernel (in, 4H)`,
`recurrent_kernel (H, 4H)`, `bias (4H,)`, gates **i, f, c, o** (PyTorch's i, f, g, o)::

    z = x @ kernel + h @ recurrent_kernel + bias ;  i, f, c~, o = split(z, 4)
    c' = sigmoid(f) * c + sigmoid(i) * tanh(c~) ;  h' = sigmoid(o) * tanh(c')

One bias: `bias = b_ih + b_hh` (exact); back from Keras `b_ih = bias`, `b_hh = 0`.

GRU (`keras.layers.GRU(H, reset_after=True, use_bias=spec.bias)`): `kernel (in, 3H)`,
`recurrent_kernel (H, 3H)`, `bias (2, 3H)` (row 0 input bias, row 1 recurrent bias),
gates **z, r, h**::

    xz, xr, xh = split(x @ kernel + bias[0], 3) ;  hz, hr, hh = split(h @ recurrent_kernel + bias[1], 3)
    z = sigmoid(xz + hz) ;  r = sigmoid(xr + hr) ;  h~ = tanh(xh + r * hh)
    h' = z * h + (1 - z) * h~

Both GRU biases are kept, so GRUs round-trip exactly.

`gru_reset_before` is `keras.layers.GRU(H, reset_after=False, use_bias=spec.bias)` (the
Keras 2 default): same kernels, one input-side bias `(3H,)`, gates **z, r, h**::

    xz, xr, xh = split(x @ kernel + bias, 3)
    z = sigmoid(xz + h @ U_z) ;  r = sigmoid(xr + h @ U_r) ;  h~ = tanh(xh + (r * h) @ U_h)
    h' = z * h + (1 - z) * h~

Every recurrent bias is added outside the reset product there (n = tanh(W_in x + b_in +
W_hn (r h) + b_hn)), so `bias = b_ih + b_hh` folds exactly, as for the LSTM.  A
`(3H,)` bias given for a `gru` spec (or a `(2, 3H)` one for `gru_reset_before`) raises,
naming the cell that computes it.  `read_keras_model(trees)` infers the spec (LSTM/GRU
from the kernel widths, reset_after from the bias shape) and returns `(spec, params)`.
Keras has no LayerNorm or peephole LSTM: `ln_lstm` and `peephole_lstm` raise.

`bias=False` specs give no `bias` entry (`use_bias=False`).  No projection:
`proj_size > 0` raises.  Keras LSTM states are `[h, c]` (h first).

Load with `layer.set_weights([w["kernel"], w["recurrent_kernel"]] + ([w["bias"]] if "bias" in w else []))`;
for `keras.layers.Bidirectional`, direction 0 is the forward layer, 1 the backward one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rnnbench.core.spec import RNNSpec
from ._common import (
    ConversionError, canonical_entries, check_keys, check_layer, check_tree, layer_arrays, reject_projection,
    reorder, require_cells, unorder)

GATE_ORDER = {"lstm": ("i", "f", "g", "o"), "gru": ("z", "r", "n"), "gru_reset_before": ("z", "r", "n")}
KERAS_CELLS = tuple(GATE_ORDER)  # the cells a Keras layer computes exactly
FOLDED_BIAS = ("lstm", "gru_reset_before")  # one (G*H,) bias = b_ih + b_hh


def _require_keras_cell(spec: RNNSpec) -> None:
    require_cells(spec, KERAS_CELLS, "Keras (LSTM, GRU reset_after=True/False)")
    reject_projection(spec, "Keras LSTM")


def keras_weight_shapes(spec: RNNSpec, layer: int = 0) -> dict[str, tuple[int, ...]]:
    """{"kernel": shape, "recurrent_kernel": shape[, "bias": shape]} of one Keras layer."""
    _require_keras_cell(spec)
    GH, H = spec.num_gates * spec.hidden_size, spec.hidden_size
    shapes = {"kernel": (spec.layer_input_size(layer), GH), "recurrent_kernel": (H, GH)}
    if spec.bias:
        shapes["bias"] = (GH,) if spec.cell in FOLDED_BIAS else (2, GH)
    return shapes


def to_keras(spec: RNNSpec, params: Mapping, layer: int = 0, direction: int = 0, dtype=np.float64) -> dict:
    """{"kernel", "recurrent_kernel"[, "bias"]} of the Keras layer for `layer`/`direction`.

    `gru` is a Keras GRU(reset_after=True), `gru_reset_before` a GRU(reset_after=False).
    """
    _require_keras_cell(spec)
    suffix = check_layer(spec, layer, direction)
    a = layer_arrays(spec, params, suffix)
    order = GATE_ORDER[spec.cell]
    out = {"kernel": np.array(reorder(spec, a["w_ih"], order).T, dtype=dtype),
           "recurrent_kernel": np.array(reorder(spec, a["w_hh"], order).T, dtype=dtype)}
    if spec.bias:
        if spec.cell in FOLDED_BIAS:
            out["bias"] = np.array(reorder(spec, a["b_ih"] + a["b_hh"], order), dtype=dtype)
        else:
            out["bias"] = np.array([reorder(spec, a["b_ih"], order), reorder(spec, a["b_hh"], order)], dtype=dtype)
    return out


def from_keras(spec: RNNSpec, weights: Mapping, layer: int = 0, direction: int = 0,
               dtype=np.float64) -> dict[str, np.ndarray]:
    """Canonical entries of one layer/direction from Keras weights (see `to_keras`)."""
    _require_keras_cell(spec)
    suffix = check_layer(spec, layer, direction)
    what = f"Keras {spec.family.upper()} weights for {suffix} (cell={spec.cell!r})"
    if spec.cell == "gru" and isinstance(weights, Mapping) and np.ndim(weights.get("bias", np.zeros((2, 1)))) == 1:
        raise ConversionError(
            f"{what}: bias has shape {np.shape(weights['bias'])}, a reset_after=False GRU (reset applied before the "
            f"recurrent matmul): a different function from PyTorch's GRU; that is cell='gru_reset_before' "
            f"(or use reset_after=True, bias (2, 3H))")
    if spec.cell == "gru_reset_before" and isinstance(weights, Mapping) and np.ndim(weights.get("bias", 0)) == 2:
        raise ConversionError(
            f"{what}: bias has shape {np.shape(weights['bias'])}, a reset_after=True GRU (reset applied after the "
            f"recurrent matmul, PyTorch's GRU), but the spec has cell='gru_reset_before'; that is cell='gru'")
    shapes = keras_weight_shapes(spec, layer)
    if not spec.bias and isinstance(weights, Mapping) and "bias" in weights:
        # use_bias=True weights into a bias=False spec: accepted only if the bias is zero
        shapes["bias"] = keras_weight_shapes(RNNSpec(**{**spec.to_dict(), "bias": True}), layer)["bias"]
    flat = check_tree(weights, shapes, what)
    order = GATE_ORDER[spec.cell]
    GH = spec.num_gates * spec.hidden_size
    bias = flat.get("bias")
    if spec.cell in FOLDED_BIAS:
        b_ih = np.zeros(GH) if bias is None else unorder(spec, bias, order)
        b_hh = np.zeros(GH)
    else:
        b_ih = np.zeros(GH) if bias is None else unorder(spec, bias[0], order)
        b_hh = np.zeros(GH) if bias is None else unorder(spec, bias[1], order)
    return canonical_entries(spec, suffix, unorder(spec, flat["kernel"].T, order),
                             unorder(spec, flat["recurrent_kernel"].T, order), b_ih, b_hh, source="Keras", dtype=dtype)


def to_keras_model(spec: RNNSpec, params: Mapping, dtype=np.float64) -> dict[str, dict]:
    """`{"l0": weights, "l0_reverse": weights, ...}`, one `to_keras` per layer/direction."""
    return {spec.suffix(l, d): to_keras(spec, params, l, d, dtype) for l, d in spec.layers_and_directions()}


def from_keras_model(spec: RNNSpec, trees: Mapping, dtype=np.float64) -> dict[str, np.ndarray]:
    """Inverse of `to_keras_model`: the full canonical dict, in `state_dict` order."""
    check_keys(trees, [spec.suffix(l, d) for l, d in spec.layers_and_directions()], "Keras model")
    out: dict[str, np.ndarray] = {}
    for l, d in spec.layers_and_directions():
        out.update(from_keras(spec, trees[spec.suffix(l, d)], l, d, dtype))
    return {name: out[name] for name in spec.param_names()}


def read_keras_model(trees: Mapping, *, reset_after: bool | None = None, batch_first: bool = False,
                     dtype=np.float64) -> tuple[RNNSpec, dict[str, np.ndarray]]:
    """`(spec, params)` from `{"l0": weights, "l0_reverse": weights, ...}`, choosing the cell.

    LSTM or GRU from the kernel widths (4H or 3H columns for H = recurrent_kernel rows);
    a GRU is `gru` with a (2, 3H) bias (reset_after=True) and `gru_reset_before` with a
    (3H,) bias (reset_after=False).  A GRU without bias does not show which it is: pass
    `reset_after`.  num_layers, bidirectional, input_size, bias come from the keys and shapes.
    """
    if not isinstance(trees, Mapping) or "l0" not in trees:
        raise ConversionError("read_keras_model expects a dict {'l0': weights, ...} as to_keras_model returns")
    first = trees["l0"]
    if not isinstance(first, Mapping) or "kernel" not in first or "recurrent_kernel" not in first:
        raise ConversionError("read_keras_model: each entry must hold kernel and recurrent_kernel")
    kernel, recurrent = np.asarray(first["kernel"]), np.asarray(first["recurrent_kernel"])
    H = recurrent.shape[0]
    gates = recurrent.shape[1] // H if recurrent.ndim == 2 and H else 0
    if gates not in (3, 4) or recurrent.shape[1] != gates * H:
        raise ConversionError(f"read_keras_model: recurrent_kernel shape {recurrent.shape} is neither (H, 4H) "
                              f"(LSTM) nor (H, 3H) (GRU)")
    has_bias = "bias" in first
    if gates == 4:
        cell = "lstm"
    else:
        bias_after = None if not has_bias else np.ndim(first["bias"]) == 2
        if reset_after is not None and bias_after is not None and reset_after != bias_after:
            raise ConversionError(f"read_keras_model: reset_after={reset_after} but the bias has shape "
                                  f"{np.shape(first['bias'])}")
        after = bias_after if bias_after is not None else reset_after
        if after is None:
            raise ConversionError("read_keras_model: a GRU without bias does not show whether reset_after is "
                                  "True (cell 'gru') or False (cell 'gru_reset_before'); pass reset_after")
        cell = "gru" if after else "gru_reset_before"
    num_layers = 1
    while f"l{num_layers}" in trees:
        num_layers += 1
    spec = RNNSpec(cell, input_size=int(kernel.shape[0]), hidden_size=int(H), num_layers=num_layers,
                   bias=has_bias, batch_first=batch_first, bidirectional="l0_reverse" in trees)
    return spec, from_keras_model(spec, trees, dtype)
