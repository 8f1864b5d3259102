"""The reference's driver: input checks, and layers x directions x lengths for every cell.

Internally everything runs time-major, (T, B, features).  Each direction walks steps
s = 0..T-1; `time_index[s, b]` is the time step that step s reads and writes for
sequence b (s for the forward direction, length_b - 1 - s for the reverse one) and
`valid[s, b]` says whether s < length_b.  On an invalid step the state is carried over
unchanged, which gives the packed-sequence semantics for both directions.  The cell is
looked up in the reference's cell table (`rnnbench.reference.table`) by `spec.cell`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from rnnbench.core.params import check_params
from rnnbench.core.spec import RNNSpec
from .table import get_cell_step

__all__ = ["ForwardResult", "forward", "backward", "run_case", "check_inputs", "step_params"]


# ---- input validation --------------------------------------------------------------------

def _as_float64(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric array, got dtype {array.dtype}")
    return array.astype(np.float64)


def check_inputs(spec, params, x, h0, c0, lengths):
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


def step_params(spec: RNNSpec, params: Mapping, layer: int, direction: int, arrays: Mapping | None = None):
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
    params, x, h0, c0, lengths_in = check_inputs(spec, params, x, h0, c0, lengths)
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
            p = step_params(spec, params, layer, direction)
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
            p = step_params(spec, params, layer, direction)
            g = step_params(spec, params, layer, direction, arrays=grads)  # views into grads
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
