"""Helpers shared by the converters: validation, gate reordering, bias folding.

Canonical parameters are PyTorch's `state_dict` (see `rnnbench.core.params`): gate order
`i, f, g, o` (LSTM) and `r, z, n` (GRU) along the first axis, two biases `b_ih`, `b_hh`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rnnbench.core.params import check_params
from rnnbench.core.spec import GATES, RNNSpec


class ConversionError(ValueError):
    """A model cannot be converted: the target cannot hold it, or the input is malformed."""


def check_layer(spec: RNNSpec, layer: int, direction: int) -> str:
    """Validate `layer`/`direction` against `spec`; return the name suffix `l{k}[_reverse]`."""
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < spec.num_layers:
        raise ConversionError(f"layer must be an integer in [0, {spec.num_layers}), got {layer!r}")
    if isinstance(direction, bool) or not isinstance(direction, int) or not 0 <= direction < spec.num_directions:
        raise ConversionError(
            f"direction must be an integer in [0, {spec.num_directions}) for bidirectional={spec.bidirectional}, "
            f"got {direction!r}")
    return spec.suffix(layer, direction)


def require_cells(spec: RNNSpec, cells: tuple[str, ...], target: str) -> None:
    """Raise unless `spec.cell` is one of `cells`, the cells `target` can hold exactly."""
    if spec.cell not in cells:
        raise ConversionError(
            f"{target} cannot hold cell={spec.cell!r}: it has no such cell (it holds {', '.join(cells)}), "
            f"so the model cannot be represented")


def reject_projection(spec: RNNSpec, target: str) -> None:
    """Raise when the spec uses proj_size: none of the targets here has a projection."""
    if spec.proj_size:
        raise ConversionError(
            f"{target} cannot hold weight_hr_l* (proj_size={spec.proj_size}): its LSTM has no output "
            f"projection, so the model cannot be represented")


def layer_arrays(spec: RNNSpec, params: Mapping, suffix: str) -> dict[str, np.ndarray]:
    """The canonical arrays of one layer/direction as float64, keyed by role.

    Keys: "w_ih" (G*H, in), "w_hh" (G*H, H), "b_ih", "b_hh" (G*H,); biases are zeros
    when `spec.bias` is False, so every target sees the same function.
    """
    check_params(spec, params)
    GH = spec.num_gates * spec.hidden_size
    out = {"w_ih": np.asarray(params[f"weight_ih_{suffix}"], dtype=np.float64),
           "w_hh": np.asarray(params[f"weight_hh_{suffix}"], dtype=np.float64)}
    if spec.bias:
        out["b_ih"] = np.asarray(params[f"bias_ih_{suffix}"], dtype=np.float64)
        out["b_hh"] = np.asarray(params[f"bias_hh_{suffix}"], dtype=np.float64)
    else:
        out["b_ih"] = np.zeros(GH)
        out["b_hh"] = np.zeros(GH)
    return out


def gate_blocks(spec: RNNSpec, array: np.ndarray) -> dict[str, np.ndarray]:
    """Split along axis 0 into the canonical gate blocks, keyed by gate letter."""
    return dict(zip(GATES[spec.cell], np.split(np.asarray(array), spec.num_gates, axis=0)))


def reorder(spec: RNNSpec, array: np.ndarray, order: tuple[str, ...], axis: int = 0) -> np.ndarray:
    """Re-stack the gate blocks of a canonical fused array (gates on `axis`) in `order`.

    `order` names canonical gates, e.g. ("i", "o", "f", "g") for ONNX's i,o,f,c.
    """
    blocks = dict(zip(GATES[spec.cell], np.split(np.asarray(array), spec.num_gates, axis=axis)))
    return np.concatenate([blocks[g] for g in order], axis=axis)


def unorder(spec: RNNSpec, array: np.ndarray, order: tuple[str, ...], axis: int = 0) -> np.ndarray:
    """Inverse of `reorder`: from gate blocks stacked in `order` back to canonical order."""
    blocks = dict(zip(order, np.split(np.asarray(array), len(order), axis=axis)))
    return np.concatenate([blocks[g] for g in GATES[spec.cell]], axis=axis)


def canonical_entries(spec: RNNSpec, suffix: str, w_ih, w_hh, b_ih, b_hh, *, source: str,
                      dtype=np.float64) -> dict[str, np.ndarray]:
    """Canonical entries of one layer/direction from converted arrays.

    With `spec.bias` False the biases are dropped, which is only allowed when they are
    all zero; otherwise the model is not the one the spec describes.
    """
    out = {f"weight_ih_{suffix}": np.asarray(w_ih, dtype=dtype),
           f"weight_hh_{suffix}": np.asarray(w_hh, dtype=dtype)}
    if spec.bias:
        out[f"bias_ih_{suffix}"] = np.asarray(b_ih, dtype=dtype)
        out[f"bias_hh_{suffix}"] = np.asarray(b_hh, dtype=dtype)
    elif np.any(np.asarray(b_ih) != 0) or np.any(np.asarray(b_hh) != 0):
        raise ConversionError(
            f"the {source} weights of {suffix} have non-zero biases but the spec has bias=False; "
            f"converting would drop them (use a spec with bias=True)")
    return out


def flatten(tree: Mapping, prefix: str = "") -> dict[str, object]:
    """Nested mappings -> {"a/b/c": leaf}."""
    flat: dict[str, object] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, path + "/"))
        else:
            flat[path] = value
    return flat


def check_tree(tree: Mapping, expected: Mapping[str, tuple[int, ...]], what: str) -> dict[str, np.ndarray]:
    """Compare a nested tree with expected {"path": shape}; raise listing every problem.

    Returns the flat {"path": float64 array}.
    """
    if not isinstance(tree, Mapping):
        raise ConversionError(f"{what}: expected a nested dict of arrays, got {type(tree).__name__}")
    flat = flatten(tree)
    problems = []
    missing = [k for k in expected if k not in flat]
    unexpected = [k for k in flat if k not in expected]
    if missing:
        problems.append("missing: " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected: " + ", ".join(unexpected))
    arrays = {}
    for key, shape in expected.items():
        if key in flat:
            arr = np.asarray(flat[key], dtype=np.float64)
            if arr.shape != tuple(shape):
                problems.append(f"{key} has shape {arr.shape}, expected {tuple(shape)}")
            arrays[key] = arr
    if problems:
        raise ConversionError(f"{what}: " + "; ".join(problems))
    return arrays


def nest(flat: Mapping[str, np.ndarray]) -> dict:
    """{"a/b": x} -> {"a": {"b": x}}."""
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def effective_biases(spec: RNNSpec, params: Mapping) -> dict[str, np.ndarray]:
    """The bias combinations that determine the function a model computes.

    LSTM, peephole_lstm, gru_reset_before: `b_ih + b_hh` per layer/direction (key
    `bias_l{k}[_reverse]`; in the reset-before GRU b_hn is added after the matmul, so it
    folds too).
    GRU: `b_ih + b_hh` for the r and z gates, and `b_in`, `b_hn` separately (b_hn is
    multiplied by r, so it cannot be folded): keys `bias_rz_*`, `bias_in_*`, `bias_hn_*`.
    ln_lstm (and any other cell): `b_ih` and `b_hh` as they are (they pass through
    different LayerNorms): keys `bias_ih_*`, `bias_hh_*`.
    Two canonical dicts compute the same function iff their weights are equal and these
    are equal; converters through one-bias layouts preserve exactly these.
    """
    out = {}
    for layer, direction in spec.layers_and_directions():
        s = spec.suffix(layer, direction)
        arr = layer_arrays(spec, params, s)
        total = arr["b_ih"] + arr["b_hh"]
        if spec.cell in ("lstm", "peephole_lstm", "gru_reset_before"):
            out[f"bias_{s}"] = total
        elif spec.cell != "gru":
            out[f"bias_ih_{s}"] = arr["b_ih"]
            out[f"bias_hh_{s}"] = arr["b_hh"]
        else:
            H = spec.hidden_size
            out[f"bias_rz_{s}"] = total[:2 * H]
            out[f"bias_in_{s}"] = arr["b_ih"][2 * H:]
            out[f"bias_hn_{s}"] = arr["b_hh"][2 * H:]
    return out


def cell_name(cell_type, allowed: tuple[str, ...], default: str, target: str) -> str:
    """Normalise a cell type given as a name or a class; check it is in `allowed`."""
    if cell_type is None:
        return default
    name = getattr(cell_type, "__name__", cell_type)
    if name not in allowed:
        raise ConversionError(f"{target}: cell_type must be one of {allowed} for this spec, got {cell_type!r}")
    return name


def check_keys(trees: Mapping, expected: list[str], what: str) -> None:
    """Raise unless `trees` has exactly the keys `expected` (e.g. one per layer/direction)."""
    if not isinstance(trees, Mapping):
        raise ConversionError(f"{what}: expected a dict keyed by {expected}, got {type(trees).__name__}")
    missing = [k for k in expected if k not in trees]
    unexpected = [k for k in trees if k not in expected]
    if missing or unexpected:
        raise ConversionError(f"{what}: expected keys {expected}; missing: {missing or 'none'}; "
                              f"unexpected: {unexpected or 'none'}")
