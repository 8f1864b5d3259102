"""Canonical parameters <-> Flax linen `LSTMCell` / `OptimizedLSTMCell` / `GRUCell` trees.

Flax linen (0.12.8) cells hold one Dense per gate, kernels `(in, H)` (the transpose of
PyTorch's blocks), and one bias per gate:

LSTM (`LSTMCell` and `OptimizedLSTMCell` share the tree)::

    i = sigmoid(x @ ii.kernel + h @ hi.kernel + hi.bias)      ii..io: kernel only
    f = sigmoid(x @ if.kernel + h @ hf.kernel + hf.bias)      hi..ho: kernel and bias
    g = tanh   (x @ ig.kernel + h @ hg.kernel + hg.bias)
    o = sigmoid(x @ io.kernel + h @ ho.kernel + ho.bias)
    c' = f * c + i * g ;  h' = o * tanh(c')

so `h{gate}.bias = b_ih[gate] + b_hh[gate]` (the two biases are summed, exactly).

GRU (`GRUCell`)::

    r = sigmoid(x @ ir.kernel + ir.bias + h @ hr.kernel)      ir, iz, in: kernel and bias
    z = sigmoid(x @ iz.kernel + iz.bias + h @ hz.kernel)      hr, hz: kernel only
    n = tanh(x @ in.kernel + in.bias + r * (h @ hn.kernel + hn.bias))   hn: kernel and bias
    h' = (1 - z) * n + z * h

which is PyTorch's GRU (reset applied after the recurrent matmul) with
`ir.bias = b_ir + b_hr`, `iz.bias = b_iz + b_hz`, `in.bias = b_in`, `hn.bias = b_hn`: every
canonical GRU converts exactly.

The carry of the LSTM cells is the tuple `(c, h)` -- c first -- and of `GRUCell` just `h`
(`flax_carry` builds it from PyTorch-layout `h0`/`c0`).

Back from Flax: a folded bias comes back as `b_ih` with `b_hh = 0` (LSTM: all gates; GRU:
r and z; GRU `b_in`/`b_hn` come back where they were).  The function is the same; compare
models with `effective_biases`.  A spec with `bias=False` converts to zero Flax biases
(the Flax cells always have them) and converts back only if they are all zero.
Flax LSTM cells have no output projection, so `proj_size > 0` raises.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rnnbench.core.catalogue import STANDARD_CELLS
from rnnbench.core.spec import RNNSpec
from ._common import (
    ConversionError, canonical_entries, cell_name, check_keys, check_layer, check_tree, gate_blocks, layer_arrays,
    reject_projection, require_cells)

LSTM_CELLS = ("LSTMCell", "OptimizedLSTMCell")
GRU_CELLS = ("GRUCell",)


def _cell(spec: RNNSpec, cell_type) -> str:
    require_cells(spec, STANDARD_CELLS, "flax linen")  # its cells compute PyTorch's LSTM/GRU only
    if spec.cell == "lstm":
        return cell_name(cell_type, LSTM_CELLS, "LSTMCell", "flax linen")
    return cell_name(cell_type, GRU_CELLS, "GRUCell", "flax linen")


def linen_param_shapes(spec: RNNSpec, layer: int = 0) -> dict[str, tuple[int, ...]]:
    """Flat {"name/kernel": shape} of the linen cell tree for `layer` (the inner dict)."""
    H, I = spec.hidden_size, spec.layer_input_size(layer)
    if spec.cell == "lstm":
        shapes = {f"i{g}/kernel": (I, H) for g in "ifgo"}
        for g in "ifgo":
            shapes[f"h{g}/kernel"] = (H, H)
            shapes[f"h{g}/bias"] = (H,)
        return shapes
    shapes = {}
    for g in "rzn":
        shapes[f"i{g}/kernel"] = (I, H)
        shapes[f"i{g}/bias"] = (H,)
        shapes[f"h{g}/kernel"] = (H, H)
    shapes["hn/bias"] = (H,)
    return shapes


def to_flax_linen(spec: RNNSpec, params: Mapping, layer: int = 0, direction: int = 0, cell_type=None,
                  dtype=np.float64) -> dict:
    """The variables `{"params": {...}}` of one linen cell for `layer`/`direction`.

    Pass it to `cell.apply(variables, carry, x)` directly; nest `variables["params"]` as
    `{"params": {"cell": ...}}` for `flax.linen.RNN(cell)`.  `cell_type` ("LSTMCell",
    "OptimizedLSTMCell", "GRUCell" or the class) only checks the cell matches the spec
    (both LSTM cells share one tree).  Arrays are NumPy of `dtype` (float64 by default).
    """
    _cell(spec, cell_type)
    reject_projection(spec, "flax linen LSTMCell")
    suffix = check_layer(spec, layer, direction)
    a = layer_arrays(spec, params, suffix)
    w_ih, w_hh = gate_blocks(spec, a["w_ih"]), gate_blocks(spec, a["w_hh"])
    b_ih, b_hh = gate_blocks(spec, a["b_ih"]), gate_blocks(spec, a["b_hh"])
    cast = lambda x: np.array(x, dtype=dtype)  # noqa: E731  (fresh copies, caller may mutate)
    tree: dict[str, dict[str, np.ndarray]] = {}
    if spec.cell == "lstm":
        for g, name in zip("ifgo", "ifgo"):
            tree[f"i{name}"] = {"kernel": cast(w_ih[g].T)}
            tree[f"h{name}"] = {"kernel": cast(w_hh[g].T), "bias": cast(b_ih[g] + b_hh[g])}
    else:
        tree["ir"] = {"kernel": cast(w_ih["r"].T), "bias": cast(b_ih["r"] + b_hh["r"])}
        tree["iz"] = {"kernel": cast(w_ih["z"].T), "bias": cast(b_ih["z"] + b_hh["z"])}
        tree["in"] = {"kernel": cast(w_ih["n"].T), "bias": cast(b_ih["n"])}
        tree["hr"] = {"kernel": cast(w_hh["r"].T)}
        tree["hz"] = {"kernel": cast(w_hh["z"].T)}
        tree["hn"] = {"kernel": cast(w_hh["n"].T), "bias": cast(b_hh["n"])}
    return {"params": tree}


def from_flax_linen(spec: RNNSpec, variables: Mapping, layer: int = 0, direction: int = 0, cell_type=None,
                    dtype=np.float64) -> dict[str, np.ndarray]:
    """Canonical entries (`weight_ih_l{k}[_reverse]`, ...) of one layer/direction.

    Accepts the variables `{"params": {...}}` or the inner cell dict.  Folded biases
    come back as `b_ih` with `b_hh = 0` (see the module docstring).
    """
    _cell(spec, cell_type)
    reject_projection(spec, "flax linen LSTMCell")
    suffix = check_layer(spec, layer, direction)
    if isinstance(variables, Mapping) and set(variables) == {"params"}:
        variables = variables["params"]
    flat = check_tree(variables, linen_param_shapes(spec, layer), f"flax linen {_cell(spec, cell_type)} tree for {suffix}")
    H = spec.hidden_size
    gates = "ifgo" if spec.cell == "lstm" else "rzn"
    w_ih = np.concatenate([flat[f"i{g}/kernel"].T for g in gates])
    w_hh = np.concatenate([flat[f"h{g}/kernel"].T for g in gates])
    if spec.cell == "lstm":
        b_ih = np.concatenate([flat[f"h{g}/bias"] for g in gates])
        b_hh = np.zeros(4 * H)
    else:
        b_ih = np.concatenate([flat[f"i{g}/bias"] for g in gates])
        b_hh = np.concatenate([np.zeros(2 * H), flat["hn/bias"]])
    return canonical_entries(spec, suffix, w_ih, w_hh, b_ih, b_hh, source="flax linen", dtype=dtype)


def to_flax_linen_model(spec: RNNSpec, params: Mapping, cell_type=None, dtype=np.float64) -> dict[str, dict]:
    """`{"l0": variables, "l0_reverse": variables, ...}`, one `to_flax_linen` per layer/direction."""
    return {spec.suffix(l, d): to_flax_linen(spec, params, l, d, cell_type, dtype)
            for l, d in spec.layers_and_directions()}


def from_flax_linen_model(spec: RNNSpec, trees: Mapping[str, Mapping], cell_type=None,
                          dtype=np.float64) -> dict[str, np.ndarray]:
    """Inverse of `to_flax_linen_model`: the full canonical dict, in `state_dict` order."""
    expected = [spec.suffix(l, d) for l, d in spec.layers_and_directions()]
    check_keys(trees, expected, "flax linen model")
    out: dict[str, np.ndarray] = {}
    for l, d in spec.layers_and_directions():
        out.update(from_flax_linen(spec, trees[spec.suffix(l, d)], l, d, cell_type, dtype))
    return {name: out[name] for name in spec.param_names()}


def flax_carry(spec: RNNSpec, h0, c0=None, layer: int = 0, direction: int = 0, dtype=np.float64):
    """The Flax carry of one layer/direction from PyTorch-layout states.

    `h0`, `c0`: `(num_layers * num_directions, B, H)`.  Returns `(c, h)` (c first, as
    Flax's LSTM cells expect) for an LSTM, `h` for a GRU.  Same for linen and NNX.
    """
    reject_projection(spec, "a Flax LSTM cell")
    check_layer(spec, layer, direction)
    idx = layer * spec.num_directions + direction
    h = np.array(np.asarray(h0)[idx], dtype=dtype)
    if spec.cell == "gru":
        return h
    if c0 is None:
        raise ConversionError("c0 is required for an LSTM carry (c, h)")
    return np.array(np.asarray(c0)[idx], dtype=dtype), h

