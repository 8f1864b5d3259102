"""Canonical parameters <-> ONNX `LSTM` / `GRU` operator inputs W, R, B (one node per layer).

ONNX packs both directions of a layer into one node: `W [D, G*H, in]`, `R [D, G*H, H]`,
`B [D, 2*G*H] = [Wb, Rb]`, with D = 1 ("forward") or 2 ("bidirectional": index 0
forward, 1 reverse).  Gate order differs from PyTorch:

LSTM, order **i, o, f, c** (default activations Sigmoid, Tanh, Tanh; no peepholes)::

    i = sigmoid(X Wi^T + H Ri^T + Wbi + Rbi)      f = sigmoid(X Wf^T + H Rf^T + Wbf + Rbf)
    c~ = tanh(X Wc^T + H Rc^T + Wbc + Rbc)        C' = f * C + i * c~
    o = sigmoid(X Wo^T + H Ro^T + Wbo + Rbo)      H' = o * tanh(C')

GRU, order **z, r, h**, `linear_before_reset=1` (PyTorch's GRU)::

    z = sigmoid(X Wz^T + H Rz^T + Wbz + Rbz)      r = sigmoid(X Wr^T + H Rr^T + Wbr + Rbr)
    h~ = tanh(X Wh^T + r * (H Rh^T + Rbh) + Wbh)  H' = (1 - z) * h~ + z * H

Both biases are kept, so every canonical LSTM/GRU without projection converts exactly
(round trips are exact).  `proj_size > 0` raises: ONNX LSTM has no output projection.
With `bias=False`, B is all zeros (ONNX's default for an absent B).

Each layer is returned as::

    {"op_type": "LSTM" | "GRU", "W": ..., "R": ..., "B": ...,
     "attributes": {"hidden_size": H, "direction": "forward" | "bidirectional",
                    "layout": 0, "linear_before_reset": 1 (GRU only)}}

`layout=0` means X is `[seq, batch, in]` and `Y` is `[seq, num_directions, batch, H]`:
between layers the caller reshapes Y to `[seq, batch, num_directions*H]` (forward
features first, as PyTorch concatenates them); `initial_h`/`initial_c` of layer k are
`h0[k*D:(k+1)*D]` of PyTorch's `(num_layers*D, B, H)` states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..spec import RNNSpec
from ._common import ConversionError, canonical_entries, check_layer, layer_arrays, reject_projection, reorder, unorder

GATE_ORDER = {"lstm": ("i", "o", "f", "g"), "gru": ("z", "r", "n")}
OP_TYPE = {"lstm": "LSTM", "gru": "GRU"}
DEFAULT_ACTIVATIONS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh")}


def onnx_attributes(spec: RNNSpec) -> dict:
    """The node attributes that make an ONNX LSTM/GRU compute the canonical function."""
    attrs = {"hidden_size": spec.hidden_size,
             "direction": "bidirectional" if spec.bidirectional else "forward",
             "layout": 0}
    if spec.cell == "gru":
        attrs["linear_before_reset"] = 1
    return attrs


def to_onnx_layer(spec: RNNSpec, params: Mapping, layer: int = 0, dtype=np.float64) -> dict:
    """W, R, B and attributes of the ONNX node for `layer` (both directions)."""
    reject_projection(spec, "ONNX LSTM")
    check_layer(spec, layer, 0)
    order = GATE_ORDER[spec.cell]
    W, R, B = [], [], []
    for direction in range(spec.num_directions):
        a = layer_arrays(spec, params, spec.suffix(layer, direction))
        W.append(reorder(spec, a["w_ih"], order))
        R.append(reorder(spec, a["w_hh"], order))
        B.append(np.concatenate([reorder(spec, a["b_ih"], order), reorder(spec, a["b_hh"], order)]))
    return {"op_type": OP_TYPE[spec.cell], "W": np.array(W, dtype=dtype), "R": np.array(R, dtype=dtype),
            "B": np.array(B, dtype=dtype), "attributes": onnx_attributes(spec)}


def to_onnx(spec: RNNSpec, params: Mapping, dtype=np.float64) -> list[dict]:
    """One `to_onnx_layer` dict per layer (ONNX has one node per layer)."""
    return [to_onnx_layer(spec, params, layer, dtype) for layer in range(spec.num_layers)]


def from_onnx_layer(spec: RNNSpec, node: Mapping, layer: int = 0, dtype=np.float64) -> dict[str, np.ndarray]:
    """Canonical entries of `layer` (both directions) from an ONNX node's W, R, B, attributes.

    `B` may be absent or None (zeros).  Attributes that change the function
    (linear_before_reset=0, input_forget, clip, non-default activations, peepholes `P`)
    raise `ConversionError`; `attributes` may be omitted to skip those checks.
    """
    reject_projection(spec, "ONNX LSTM")
    check_layer(spec, layer, 0)
    what = f"ONNX {OP_TYPE[spec.cell]} node for layer {layer}"
    if not isinstance(node, Mapping):
        raise ConversionError(f"{what}: expected a dict with W, R, B, got {type(node).__name__}")
    unexpected = sorted(set(node) - {"op_type", "W", "R", "B", "P", "attributes"})
    missing = [k for k in ("W", "R") if k not in node]
    if missing or unexpected:
        raise ConversionError(f"{what}: missing: {missing or 'none'}; unexpected: {unexpected or 'none'}")
    if "op_type" in node and node["op_type"] != OP_TYPE[spec.cell]:
        raise ConversionError(f"{what}: op_type is {node['op_type']!r}, the spec has cell={spec.cell!r}")
    _check_attributes(spec, node.get("attributes"), what)
    if node.get("P") is not None and np.any(np.asarray(node["P"]) != 0):
        raise ConversionError(f"{what}: non-zero peepholes P cannot be represented (PyTorch LSTMs have none)")
    D, GH, H = spec.num_directions, spec.num_gates * spec.hidden_size, spec.hidden_size
    expected = {"W": (D, GH, spec.layer_input_size(layer)), "R": (D, GH, H), "B": (D, 2 * GH)}
    arrays = {}
    problems = []
    for key, shape in expected.items():
        if key == "B" and node.get("B") is None:
            arrays["B"] = np.zeros(shape)
            continue
        arrays[key] = np.asarray(node[key], dtype=np.float64)
        if arrays[key].shape != shape:
            problems.append(f"{key} has shape {arrays[key].shape}, expected {shape}")
    if problems:
        raise ConversionError(f"{what}: " + "; ".join(problems))
    order = GATE_ORDER[spec.cell]
    out: dict[str, np.ndarray] = {}
    for direction in range(D):
        b = arrays["B"][direction]
        out.update(canonical_entries(
            spec, spec.suffix(layer, direction), unorder(spec, arrays["W"][direction], order),
            unorder(spec, arrays["R"][direction], order), unorder(spec, b[:GH], order),
            unorder(spec, b[GH:], order), source="ONNX", dtype=dtype))
    return out


def from_onnx(spec: RNNSpec, layers: Sequence[Mapping], dtype=np.float64) -> dict[str, np.ndarray]:
    """Inverse of `to_onnx`: the full canonical dict from one node dict per layer."""
    if isinstance(layers, Mapping) or len(layers) != spec.num_layers:
        got = "a dict" if isinstance(layers, Mapping) else f"{len(layers)} layers"
        raise ConversionError(f"from_onnx expects a list of {spec.num_layers} layer dicts, got {got}")
    out: dict[str, np.ndarray] = {}
    for layer, node in enumerate(layers):
        out.update(from_onnx_layer(spec, node, layer, dtype))
    return {name: out[name] for name in spec.param_names()}


def _check_attributes(spec: RNNSpec, attrs, what: str) -> None:
    if attrs is None:
        return
    expected = onnx_attributes(spec)
    known = set(expected) | {"activations", "activation_alpha", "activation_beta", "clip", "input_forget",
                             "linear_before_reset"}
    unknown = sorted(set(attrs) - known)
    if unknown:
        raise ConversionError(f"{what}: unknown attributes {unknown}")
    for key in ("hidden_size", "direction", "layout"):
        if key in attrs and attrs[key] != expected[key]:
            raise ConversionError(f"{what}: attribute {key}={attrs[key]!r}, the spec needs {expected[key]!r}")
    if spec.cell == "gru" and attrs.get("linear_before_reset", 0) != 1:
        raise ConversionError(
            f"{what}: linear_before_reset={attrs.get('linear_before_reset', 0)} applies the reset gate before the "
            f"recurrent matmul, a different function from PyTorch's GRU (needs linear_before_reset=1)")
    if spec.cell == "lstm" and attrs.get("linear_before_reset", 0) != 0:
        raise ConversionError(f"{what}: linear_before_reset is a GRU attribute, not valid on LSTM")
    if attrs.get("input_forget", 0) != 0:
        raise ConversionError(f"{what}: input_forget=1 couples the input and forget gates; not representable")
    if attrs.get("clip") is not None:
        raise ConversionError(f"{what}: clip={attrs['clip']} clips the gate pre-activations; not representable")
    acts = attrs.get("activations")
    if acts is not None and tuple(acts) != DEFAULT_ACTIVATIONS[spec.cell] * spec.num_directions:
        raise ConversionError(f"{what}: activations {list(acts)} differ from the canonical "
                              f"{list(DEFAULT_ACTIVATIONS[spec.cell] * spec.num_directions)}")
