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

Custom cells of the catalogue (`rnnbench.core.catalogue`):

- `peephole_lstm` is an ONNX LSTM with peepholes `P [D, 3H]`, ordered **i, o, f**
  (ONNX's "P[iof]"): `i` and `f` add `P_i * C_{t-1}`, `P_f * C_{t-1}`, `o` adds
  `P_o * C_t`.  Our `peephole_l{k}[_reverse]` holds the blocks p_i, p_f, p_o, so
  `P = [p_i, p_o, p_f]`.  A plain `lstm` spec accepts a node whose P is absent or zero.
- `gru_reset_before` is an ONNX GRU with `linear_before_reset=0` (ONNX's default):
  `h~ = tanh(X Wh^T + (r * H) Rh^T + Rbh + Wbh)`.
- `ln_lstm` has no ONNX operator: converting it raises `ConversionError`.

`read_onnx(layers)` infers the spec from the nodes (cell from op_type, P and
linear_before_reset; sizes from W/R) and returns `(spec, params)`; `from_onnx(spec,
layers)` checks the nodes against a given spec and names the cell to use when they
describe another one.

Both biases are kept, so every canonical model without projection converts exactly
(round trips are exact).  `proj_size > 0` raises: ONNX LSTM has no output projection.
With `bias=False`, B is all zeros (ONNX's default for an absent B).

Each layer is returned as::

    {"op_type": "LSTM" | "GRU", "W": ..., "R": ..., "B": ..., "P": ... (peephole_lstm only),
     "attributes": {"hidden_size": H, "direction": "forward" | "bidirectional",
                    "layout": 0, "linear_before_reset": 1 (gru) | 0 (gru_reset_before)}}

Nodes read back may also have `layout=1` (batch-major: X `[batch, seq, in]`, Y `[batch,
seq, num_directions, H]`, states `[batch, num_directions, H]`) when the spec has
`batch_first=True`; the weights do not depend on the layout.
`layout=0` means X is `[seq, batch, in]` and `Y` is `[seq, num_directions, batch, H]`:
between layers the caller reshapes Y to `[seq, batch, num_directions*H]` (forward
features first, as PyTorch concatenates them); `initial_h`/`initial_c` of layer k are
`h0[k*D:(k+1)*D]` of PyTorch's `(num_layers*D, B, H)` states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from rnnbench.core.spec import RNNSpec
from ._common import (
    ConversionError, canonical_entries, check_layer, layer_arrays, reject_projection, reorder, require_cells,
    unorder)

# Cells an ONNX node can hold exactly -> (op_type, linear_before_reset or None).
ONNX_CELLS = {"lstm": ("LSTM", None), "peephole_lstm": ("LSTM", None), "gru": ("GRU", 1),
              "gru_reset_before": ("GRU", 0)}
GATE_ORDER = {"LSTM": ("i", "o", "f", "g"), "GRU": ("z", "r", "n")}
OP_TYPE = {cell: op for cell, (op, _) in ONNX_CELLS.items()}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh")}
# ONNX's P is [P_i, P_o, P_f]; our peephole vector is [p_i, p_f, p_o].
ONNX_PEEPHOLE_ORDER = (0, 2, 1)  # ONNX block k holds our block ONNX_PEEPHOLE_ORDER[k]


def _require_onnx_cell(spec: RNNSpec) -> str:
    """The ONNX op_type of the spec's cell; ConversionError for cells ONNX cannot hold."""
    require_cells(spec, tuple(ONNX_CELLS), "ONNX")
    reject_projection(spec, "ONNX LSTM")
    return ONNX_CELLS[spec.cell][0]


def onnx_attributes(spec: RNNSpec) -> dict:
    """The node attributes that make an ONNX LSTM/GRU compute the canonical function."""
    _require_onnx_cell(spec)
    attrs = {"hidden_size": spec.hidden_size,
             "direction": "bidirectional" if spec.bidirectional else "forward",
             "layout": 0}
    if ONNX_CELLS[spec.cell][1] is not None:
        attrs["linear_before_reset"] = ONNX_CELLS[spec.cell][1]
    return attrs


def _peephole_to_onnx(p: np.ndarray) -> np.ndarray:
    blocks = np.split(np.asarray(p, dtype=np.float64), 3)
    return np.concatenate([blocks[k] for k in ONNX_PEEPHOLE_ORDER])


def _peephole_from_onnx(P: np.ndarray) -> np.ndarray:
    blocks = np.split(np.asarray(P, dtype=np.float64), 3)  # [P_i, P_o, P_f]
    ours = [None] * 3
    for onnx_k, ours_k in enumerate(ONNX_PEEPHOLE_ORDER):
        ours[ours_k] = blocks[onnx_k]
    return np.concatenate(ours)


def to_onnx_layer(spec: RNNSpec, params: Mapping, layer: int = 0, dtype=np.float64) -> dict:
    """W, R, B (and P for peephole_lstm) and attributes of the ONNX node for `layer` (both directions)."""
    op = _require_onnx_cell(spec)
    check_layer(spec, layer, 0)
    order = GATE_ORDER[op]
    W, R, B, P = [], [], [], []
    for direction in range(spec.num_directions):
        suffix = spec.suffix(layer, direction)
        a = layer_arrays(spec, params, suffix)
        W.append(reorder(spec, a["w_ih"], order))
        R.append(reorder(spec, a["w_hh"], order))
        B.append(np.concatenate([reorder(spec, a["b_ih"], order), reorder(spec, a["b_hh"], order)]))
        if spec.cell == "peephole_lstm":
            P.append(_peephole_to_onnx(params[f"peephole_{suffix}"]))
    node = {"op_type": op, "W": np.array(W, dtype=dtype), "R": np.array(R, dtype=dtype),
            "B": np.array(B, dtype=dtype), "attributes": onnx_attributes(spec)}
    if P:
        node["P"] = np.array(P, dtype=dtype)
    return node


def to_onnx(spec: RNNSpec, params: Mapping, dtype=np.float64) -> list[dict]:
    """One `to_onnx_layer` dict per layer (ONNX has one node per layer)."""
    return [to_onnx_layer(spec, params, layer, dtype) for layer in range(spec.num_layers)]


def from_onnx_layer(spec: RNNSpec, node: Mapping, layer: int = 0, dtype=np.float64) -> dict[str, np.ndarray]:
    """Canonical entries of `layer` (both directions) from an ONNX node's W, R, B, P, attributes.

    `B` may be absent or None (zeros); so may `P` (zeros) for a peephole_lstm spec.  A node
    that computes a different function from the spec's cell raises `ConversionError`
    naming the cell that holds it (non-zero P into an `lstm` spec: `peephole_lstm`;
    linear_before_reset=0 into a `gru` spec: `gru_reset_before`, and the reverse), as do
    input_forget, clip and non-default activations; `attributes` may be omitted to skip
    the attribute checks.
    """
    op = _require_onnx_cell(spec)
    check_layer(spec, layer, 0)
    what = f"ONNX {op} node for layer {layer}"
    if not isinstance(node, Mapping):
        raise ConversionError(f"{what}: expected a dict with W, R, B, got {type(node).__name__}")
    unexpected = sorted(set(node) - {"op_type", "W", "R", "B", "P", "attributes"})
    missing = [k for k in ("W", "R") if k not in node]
    if missing or unexpected:
        raise ConversionError(f"{what}: missing: {missing or 'none'}; unexpected: {unexpected or 'none'}")
    if "op_type" in node and node["op_type"] != op:
        raise ConversionError(f"{what}: op_type is {node['op_type']!r}, the spec has cell={spec.cell!r}")
    _check_attributes(spec, node.get("attributes"), what)
    if node.get("P") is not None and op == "GRU":
        raise ConversionError(f"{what}: P (peepholes) is an LSTM input, not valid on GRU")
    if spec.cell == "lstm" and node.get("P") is not None and np.any(np.asarray(node["P"]) != 0):
        raise ConversionError(f"{what}: non-zero peepholes P: a peephole LSTM, which cell='lstm' (PyTorch's LSTM) "
                              f"cannot represent; use a spec with cell='peephole_lstm' (or read_onnx)")
    D, GH, H = spec.num_directions, spec.num_gates * spec.hidden_size, spec.hidden_size
    expected = {"W": (D, GH, spec.layer_input_size(layer)), "R": (D, GH, H), "B": (D, 2 * GH)}
    if spec.cell == "peephole_lstm":
        expected["P"] = (D, 3 * H)
    arrays = {}
    problems = []
    for key, shape in expected.items():
        if key in ("B", "P") and node.get(key) is None:
            arrays[key] = np.zeros(shape)
            continue
        arrays[key] = np.asarray(node[key], dtype=np.float64)
        if arrays[key].shape != shape:
            problems.append(f"{key} has shape {arrays[key].shape}, expected {shape}")
    if problems:
        raise ConversionError(f"{what}: " + "; ".join(problems))
    order = GATE_ORDER[op]
    out: dict[str, np.ndarray] = {}
    for direction in range(D):
        b = arrays["B"][direction]
        suffix = spec.suffix(layer, direction)
        out.update(canonical_entries(
            spec, suffix, unorder(spec, arrays["W"][direction], order),
            unorder(spec, arrays["R"][direction], order), unorder(spec, b[:GH], order),
            unorder(spec, b[GH:], order), source="ONNX", dtype=dtype))
        if spec.cell == "peephole_lstm":
            out[f"peephole_{suffix}"] = np.asarray(_peephole_from_onnx(arrays["P"][direction]), dtype=dtype)
    return out


def from_onnx(spec: RNNSpec, layers: Sequence[Mapping], dtype=np.float64) -> dict[str, np.ndarray]:
    """Inverse of `to_onnx`: the full canonical dict from one node dict per layer."""
    _require_onnx_cell(spec)
    if isinstance(layers, Mapping) or len(layers) != spec.num_layers:
        got = "a dict" if isinstance(layers, Mapping) else f"{len(layers)} layers"
        raise ConversionError(f"from_onnx expects a list of {spec.num_layers} layer dicts, got {got}")
    out: dict[str, np.ndarray] = {}
    for layer, node in enumerate(layers):
        out.update(from_onnx_layer(spec, node, layer, dtype))
    return {name: out[name] for name in spec.param_names()}


def read_onnx(layers: Sequence[Mapping], *, batch_first: bool = False,
              dtype=np.float64) -> tuple[RNNSpec, dict[str, np.ndarray]]:
    """`(spec, params)` from one ONNX LSTM/GRU node dict per layer, choosing the cell.

    The cell: op_type "LSTM" -> `peephole_lstm` when some node has a non-zero `P`, else
    `lstm`; op_type "GRU" -> `gru` with linear_before_reset=1, `gru_reset_before` with 0
    (ONNX's default when the attribute is absent).  hidden_size, input_size, num_layers,
    bidirectional come from the nodes' shapes and attributes; bias is True when some node
    has a non-zero B (an all-zero B is ONNX's absent B, as `to_onnx` writes for bias=False).
    `batch_first` is not inferred (layout=0, time-major, fits either); pass the one you want
    in the spec; nodes with layout=1 (batch-major) need batch_first=True.  The nodes are then
    checked and converted by `from_onnx`.
    """
    if isinstance(layers, Mapping) or not isinstance(layers, Sequence) or not layers:
        raise ConversionError("read_onnx expects a non-empty list of ONNX node dicts, one per layer")
    first = layers[0]
    if not isinstance(first, Mapping) or "W" not in first or "R" not in first:
        raise ConversionError("read_onnx: each layer must be a dict with at least W and R")
    ops = {node.get("op_type") for node in layers}
    if len(ops) != 1 or ops - {"LSTM", "GRU"}:
        raise ConversionError(f"read_onnx: every node must have the same op_type, 'LSTM' or 'GRU'; got {sorted(map(str, ops))}")
    op = ops.pop()
    W, R = np.asarray(first["W"]), np.asarray(first["R"])
    if W.ndim != 3 or R.ndim != 3:
        raise ConversionError(f"read_onnx: W and R must be [num_directions, G*H, .], got shapes {W.shape}, {R.shape}")
    attrs = [dict(node.get("attributes") or {}) for node in layers]
    if op == "LSTM":
        peephole = any(node.get("P") is not None and np.any(np.asarray(node["P"]) != 0) for node in layers)
        cell = "peephole_lstm" if peephole else "lstm"
    else:
        lbr = {a.get("linear_before_reset", 0) for a in attrs}
        if len(lbr) != 1 or lbr - {0, 1}:
            raise ConversionError(f"read_onnx: linear_before_reset must be 0 or 1 and the same in every node, "
                                  f"got {sorted(lbr)}")
        cell = "gru" if lbr.pop() == 1 else "gru_reset_before"
    spec = RNNSpec(cell, input_size=int(W.shape[2]), hidden_size=int(R.shape[2]), num_layers=len(layers),
                   bias=any(node.get("B") is not None and np.any(np.asarray(node["B"]) != 0) for node in layers), batch_first=batch_first,
                   bidirectional=W.shape[0] == 2)
    return spec, from_onnx(spec, layers, dtype)


def _check_attributes(spec: RNNSpec, attrs, what: str) -> None:
    if attrs is None:
        return
    expected = onnx_attributes(spec)
    known = set(expected) | {"activations", "activation_alpha", "activation_beta", "clip", "input_forget",
                             "linear_before_reset"}
    unknown = sorted(set(attrs) - known)
    if unknown:
        raise ConversionError(f"{what}: unknown attributes {unknown}")
    for key in ("hidden_size", "direction"):
        if key in attrs and attrs[key] != expected[key]:
            raise ConversionError(f"{what}: attribute {key}={attrs[key]!r}, the spec needs {expected[key]!r}")
    # layout only says how X/Y/states are laid out, not the weights: 0 (time-major, what
    # to_onnx writes) fits every spec, 1 (batch-major) a spec with batch_first=True.
    layout = attrs.get("layout", 0)
    if layout != 0 and not (layout == 1 and spec.batch_first):
        raise ConversionError(
            f"{what}: attribute layout={layout!r}, the spec needs 0 (time-major)"
            + (" or, with batch_first=True, 1 (batch-major): pass batch_first=True (read_onnx(..., batch_first=True))"
               if layout == 1 else " or 1 (batch-major, with batch_first=True)"))
    lbr = attrs.get("linear_before_reset", 0)
    if spec.cell == "gru" and lbr != 1:
        raise ConversionError(
            f"{what}: linear_before_reset={lbr} applies the reset gate before the recurrent matmul, a different "
            f"function from PyTorch's GRU (needs linear_before_reset=1); that node is cell='gru_reset_before'")
    if spec.cell == "gru_reset_before" and lbr != 0:
        raise ConversionError(
            f"{what}: linear_before_reset={lbr} applies the reset gate after the recurrent matmul (PyTorch's GRU), "
            f"but the spec has cell='gru_reset_before' (needs linear_before_reset=0); that node is cell='gru'")
    if OP_TYPE[spec.cell] == "LSTM" and lbr != 0:
        raise ConversionError(f"{what}: linear_before_reset is a GRU attribute, not valid on LSTM")
    if attrs.get("input_forget", 0) != 0:
        raise ConversionError(f"{what}: input_forget=1 couples the input and forget gates; not representable")
    if attrs.get("clip") is not None:
        raise ConversionError(f"{what}: clip={attrs['clip']} clips the gate pre-activations; not representable")
    acts = attrs.get("activations")
    default = DEFAULT_ACTIVATIONS[OP_TYPE[spec.cell]] * spec.num_directions
    if acts is not None and tuple(acts) != default:
        raise ConversionError(f"{what}: activations {list(acts)} differ from the canonical {list(default)}")
