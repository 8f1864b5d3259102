"""Canonical parameters <-> Keras 3 `LSTM` / `GRU` (`reset_after=True`) weights, per layer and direction.

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

Both GRU biases are kept, so GRUs round-trip exactly.  `reset_after=False` (the Keras
2 default, reset before the matmul, bias `(3H,)`) is a different function: a `(3H,)`
bias is rejected.  `bias=False` specs give no `bias` entry (`use_bias=False`).  No
projection: `proj_size > 0` raises.  Keras LSTM states are `[h, c]` (h first).

Load with `layer.set_weights([w["kernel"], w["recurrent_kernel"]] + ([w["bias"]] if "bias" in w else []))`;
for `keras.layers.Bidirectional`, direction 0 is the forward layer, 1 the backward one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..spec import RNNSpec
from ._common import (ConversionError, canonical_entries, check_keys, check_layer, check_tree, layer_arrays,
                      reject_projection, reorder, unorder)

GATE_ORDER = {"lstm": ("i", "f", "g", "o"), "gru": ("z", "r", "n")}


def keras_weight_shapes(spec: RNNSpec, layer: int = 0) -> dict[str, tuple[int, ...]]:
    """{"kernel": shape, "recurrent_kernel": shape[, "bias": shape]} of one Keras layer."""
    GH, H = spec.num_gates * spec.hidden_size, spec.hidden_size
    shapes = {"kernel": (spec.layer_input_size(layer), GH), "recurrent_kernel": (H, GH)}
    if spec.bias:
        shapes["bias"] = (GH,) if spec.cell == "lstm" else (2, GH)
    return shapes


def to_keras(spec: RNNSpec, params: Mapping, layer: int = 0, direction: int = 0, dtype=np.float64) -> dict:
    """{"kernel", "recurrent_kernel"[, "bias"]} of the Keras layer for `layer`/`direction`."""
    reject_projection(spec, "Keras LSTM")
    suffix = check_layer(spec, layer, direction)
    a = layer_arrays(spec, params, suffix)
    order = GATE_ORDER[spec.cell]
    out = {"kernel": np.array(reorder(spec, a["w_ih"], order).T, dtype=dtype),
           "recurrent_kernel": np.array(reorder(spec, a["w_hh"], order).T, dtype=dtype)}
    if spec.bias:
        if spec.cell == "lstm":
            out["bias"] = np.array(a["b_ih"] + a["b_hh"], dtype=dtype)
        else:
            out["bias"] = np.array([reorder(spec, a["b_ih"], order), reorder(spec, a["b_hh"], order)], dtype=dtype)
    return out


def from_keras(spec: RNNSpec, weights: Mapping, layer: int = 0, direction: int = 0,
               dtype=np.float64) -> dict[str, np.ndarray]:
    """Canonical entries of one layer/direction from Keras weights (see `to_keras`)."""
    reject_projection(spec, "Keras LSTM")
    suffix = check_layer(spec, layer, direction)
    what = f"Keras {spec.cell.upper()} weights for {suffix}"
    if spec.cell == "gru" and isinstance(weights, Mapping) and np.ndim(weights.get("bias", np.zeros((2, 1)))) == 1:
        raise ConversionError(
            f"{what}: bias has shape {np.shape(weights['bias'])}, a reset_after=False GRU (reset applied before the "
            f"recurrent matmul): a different function from PyTorch's GRU; use reset_after=True, bias (2, 3H)")
    shapes = keras_weight_shapes(spec, layer)
    if not spec.bias and isinstance(weights, Mapping) and "bias" in weights:
        # use_bias=True weights into a bias=False spec: accepted only if the bias is zero
        shapes["bias"] = keras_weight_shapes(RNNSpec(**{**spec.to_dict(), "bias": True}), layer)["bias"]
    flat = check_tree(weights, shapes, what)
    order = GATE_ORDER[spec.cell]
    GH = spec.num_gates * spec.hidden_size
    bias = flat.get("bias")
    if spec.cell == "lstm":
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
