"""Canonical parameters <-> the param state of Flax NNX `LSTMCell` / `OptimizedLSTMCell` / `GRUCell`.

The trees here are NNX "pure dicts" (`nnx.to_pure_dict(nnx.state(cell, nnx.Param))` in
flax 0.12.8).  Load one into a cell with::

    state = nnx.state(cell, nnx.Param)
    nnx.replace_by_pure_dict(state, tree)
    nnx.update(cell, state)

Kernels are `(in, out)`, the transpose of PyTorch's.  Layouts:

- `LSTMCell`: one Linear per gate, named `ii, if_, ig, io` (kernel only; note `if_`)
  and `hi, hf, hg, ho` (kernel and bias) -- the linen `LSTMCell` equations, with
  `h{gate}.bias = b_ih[gate] + b_hh[gate]`.
- `OptimizedLSTMCell`: fused `dense_i.kernel (in, 4H)`, `dense_h.kernel (H, 4H)`,
  `dense_h.bias (4H,)`, gates `i, f, g, o` along the last axis; bias `b_ih + b_hh`.
- `GRUCell`: `dense_i.kernel (in, 3H)`, `dense_i.bias (3H,)`, `dense_h.kernel (H, 3H)`
  with no bias, gates `r, z, n`::

      r = sigmoid(x W_ir + b_i[r] + h W_hr);  z = sigmoid(x W_iz + b_i[z] + h W_hz)
      n = tanh(x W_in + b_i[n] + r * (h W_hn));  h' = (1 - z) * n + z * h

  `b_i = [b_ir + b_hr, b_iz + b_hz, b_in]`.  There is no place for `b_hn` (it sits
  inside `r * (...)` and cannot be folded): a canonical GRU with non-zero `b_hn`
  raises `ConversionError`; a zero `b_hn` converts exactly.

LSTM carries are `(c, h)` (c first), the GRU carry is `h`; see `flax_carry`.  Back from
NNX, folded biases come back as `b_ih` with `b_hh = 0` (compare with
`effective_biases`).  A `bias=False` spec converts to zero biases and back only from
zero biases.  No projection: `proj_size > 0` raises.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rnnbench.core.catalogue import STANDARD_CELLS
from rnnbench.core.spec import RNNSpec
from ._common import (
    ConversionError, canonical_entries, cell_name, check_keys, check_layer, check_tree, layer_arrays, nest,
    reject_projection, require_cells)

LSTM_CELLS = ("LSTMCell", "OptimizedLSTMCell")
GRU_CELLS = ("GRUCell",)
# NNX attribute names of the per-gate Linears in `LSTMCell` (`if` is a keyword).
_INPUT_NAMES = {"i": "ii", "f": "if_", "g": "ig", "o": "io"}


def _cell(spec: RNNSpec, cell_type) -> str:
    require_cells(spec, STANDARD_CELLS, "flax nnx")  # its cells compute PyTorch's LSTM/GRU only
    if spec.cell == "lstm":
        return cell_name(cell_type, LSTM_CELLS, "LSTMCell", "flax nnx")
    return cell_name(cell_type, GRU_CELLS, "GRUCell", "flax nnx")


def nnx_param_shapes(spec: RNNSpec, layer: int = 0, cell_type=None) -> dict[str, tuple[int, ...]]:
    """Flat {"name/kernel": shape} of the NNX cell's param pure dict for `layer`."""
    cell = _cell(spec, cell_type)
    H, I = spec.hidden_size, spec.layer_input_size(layer)
    if cell == "LSTMCell":
        shapes = {f"{_INPUT_NAMES[g]}/kernel": (I, H) for g in "ifgo"}
        for g in "ifgo":
            shapes[f"h{g}/kernel"] = (H, H)
            shapes[f"h{g}/bias"] = (H,)
        return shapes
    if cell == "OptimizedLSTMCell":
        return {"dense_i/kernel": (I, 4 * H), "dense_h/kernel": (H, 4 * H), "dense_h/bias": (4 * H,)}
    return {"dense_i/kernel": (I, 3 * H), "dense_i/bias": (3 * H,), "dense_h/kernel": (H, 3 * H)}


def to_flax_nnx(spec: RNNSpec, params: Mapping, layer: int = 0, direction: int = 0, cell_type=None,
                dtype=np.float64) -> dict:
    """The NNX param pure dict of one cell for `layer`/`direction` (no `"params"` wrapper).

    `cell_type`: "LSTMCell" (default for LSTM), "OptimizedLSTMCell", "GRUCell" or the
    class.  Raises `ConversionError` for a GRU with non-zero `b_hn` and for proj_size.
    """
    cell = _cell(spec, cell_type)
    reject_projection(spec, f"flax nnx {cell}")
    suffix = check_layer(spec, layer, direction)
    a = layer_arrays(spec, params, suffix)
    H = spec.hidden_size
    cast = lambda x: np.array(x, dtype=dtype)  # noqa: E731  (fresh copies)
    folded = a["b_ih"] + a["b_hh"]
    if cell == "LSTMCell":
        flat = {}
        for k, g in enumerate("ifgo"):
            rows = slice(k * H, (k + 1) * H)
            flat[f"{_INPUT_NAMES[g]}/kernel"] = cast(a["w_ih"][rows].T)
            flat[f"h{g}/kernel"] = cast(a["w_hh"][rows].T)
            flat[f"h{g}/bias"] = cast(folded[rows])
        return nest(flat)
    if cell == "OptimizedLSTMCell":
        return {"dense_i": {"kernel": cast(a["w_ih"].T)},
                "dense_h": {"kernel": cast(a["w_hh"].T), "bias": cast(folded)}}
    b_hn = a["b_hh"][2 * H:]
    if np.any(b_hn != 0):
        raise ConversionError(
            f"flax nnx GRUCell cannot hold bias_hh_{suffix}[{2 * H}:{3 * H}] (b_hn, the recurrent bias of the "
            f"n gate): its dense_h has no bias, and b_hn is multiplied by the reset gate r, so it cannot be "
            f"folded into dense_i.bias; max |b_hn| = {np.abs(b_hn).max():.3g}. Use flax linen GRUCell, or a "
            f"model with b_hn = 0")
    b_i = np.concatenate([folded[:2 * H], a["b_ih"][2 * H:]])
    return {"dense_i": {"kernel": cast(a["w_ih"].T), "bias": cast(b_i)},
            "dense_h": {"kernel": cast(a["w_hh"].T)}}


def _infer_cell(spec: RNNSpec, tree: Mapping, cell_type):
    if cell_type is None and spec.cell == "lstm" and isinstance(tree, Mapping) and "dense_i" in tree:
        return "OptimizedLSTMCell"
    return _cell(spec, cell_type)


def from_flax_nnx(spec: RNNSpec, tree, layer: int = 0, direction: int = 0, cell_type=None,
                  dtype=np.float64) -> dict[str, np.ndarray]:
    """Canonical entries of one layer/direction from an NNX param pure dict (or `nnx.State`).

    `cell_type=None` infers LSTMCell vs OptimizedLSTMCell from the keys.  Folded biases
    come back as `b_ih` with `b_hh = 0`.
    """
    # An nnx.State is a Mapping whose leaves (nnx.Param) support np.asarray: no import needed.
    cell = _infer_cell(spec, tree, cell_type)
    reject_projection(spec, f"flax nnx {cell}")
    suffix = check_layer(spec, layer, direction)
    flat = check_tree(tree, nnx_param_shapes(spec, layer, cell), f"flax nnx {cell} state for {suffix}")
    G, H = spec.num_gates, spec.hidden_size
    if cell == "LSTMCell":
        w_ih = np.concatenate([flat[f"{_INPUT_NAMES[g]}/kernel"].T for g in "ifgo"])
        w_hh = np.concatenate([flat[f"h{g}/kernel"].T for g in "ifgo"])
        b_ih = np.concatenate([flat[f"h{g}/bias"] for g in "ifgo"])
    elif cell == "OptimizedLSTMCell":
        w_ih, w_hh, b_ih = flat["dense_i/kernel"].T, flat["dense_h/kernel"].T, flat["dense_h/bias"]
    else:
        w_ih, w_hh, b_ih = flat["dense_i/kernel"].T, flat["dense_h/kernel"].T, flat["dense_i/bias"]
    return canonical_entries(spec, suffix, w_ih, w_hh, b_ih, np.zeros(G * H), source=f"flax nnx {cell}",
                             dtype=dtype)


def to_flax_nnx_model(spec: RNNSpec, params: Mapping, cell_type=None, dtype=np.float64) -> dict[str, dict]:
    """`{"l0": tree, "l0_reverse": tree, ...}`, one `to_flax_nnx` per layer/direction."""
    return {spec.suffix(l, d): to_flax_nnx(spec, params, l, d, cell_type, dtype)
            for l, d in spec.layers_and_directions()}


def from_flax_nnx_model(spec: RNNSpec, trees: Mapping, cell_type=None, dtype=np.float64) -> dict[str, np.ndarray]:
    """Inverse of `to_flax_nnx_model`: the full canonical dict, in `state_dict` order."""
    check_keys(trees, [spec.suffix(l, d) for l, d in spec.layers_and_directions()], "flax nnx model")
    out: dict[str, np.ndarray] = {}
    for l, d in spec.layers_and_directions():
        out.update(from_flax_nnx(spec, trees[spec.suffix(l, d)], l, d, cell_type, dtype))
    return {name: out[name] for name in spec.param_names()}
