"""ONNX's reference evaluator as one more oracle on the shared vectors.

Upstream (the onnx 1.23.2 wheel, pinned in requirements.txt), imported at run time:

- `onnx/reference/reference_evaluator.py`: `onnx.reference.ReferenceEvaluator`;
- `onnx/reference/ops/op_lstm.py` (`CommonLSTM`, `LSTM`) and `onnx/reference/ops/op_gru.py`
  (`CommonGRU`, `GRU`): the NumPy kernels it runs for the two operators (opset 22).

For every shared vector (`rnnbench.vectors`) whose spec ONNX can hold, the canonical
parameters go through `rnnbench.converters.onnx.to_onnx` (one LSTM/GRU node per layer);
each layer is a one-node ONNX model (checked with `onnx.checker.check_model(full_check=True)`),
run by the reference evaluator in **float64** (the operators accept tensor(double) and the
kernels compute in X's dtype, so the float64 tolerance 1e-9 applies), the layers stacked in
Python as the converter's docstring says (Y -> next layer's X, forward features first;
initial_h/initial_c of layer k = rows k*D:(k+1)*D of h0/c0).  Batch-first vectors use
`layout=1` nodes (batch-major X, Y, states), the others `layout=0`.  output, h_n, c_n are
compared with the vector's float64-reference values; the max errors are printed (`-s`).

Cells: lstm (ONNX LSTM), peephole_lstm (LSTM with P), gru (GRU, linear_before_reset=1),
gru_reset_before (GRU, linear_before_reset=0).  Vectors that cannot apply, skipped with the
converter's reason: every `proj_size` vector (ONNX's LSTM has no output projection) and every
`ln_lstm` vector (no ONNX operator has LayerNorm inside the cell).

sequence_lens (the corner where ONNX differs)
---------------------------------------------
The operator spec only says sequence_lens gives "lengths of the sequences in a batch"; it
does not say what Y holds past a length.  The 1.23.2 reference evaluator **ignores
sequence_lens altogether** (op_lstm.py / op_gru.py: `sequence_lens=None,  # noqa: ARG002`):
with it, every sequence still runs over all T steps of the padded X, so, unlike PyTorch's
packed sequences (and the shared vectors):

1. Y past a sequence's length is not zero but the RNN continued over the padding;
2. Y_h (and Y_c) is the state after step T-1, not after step length-1;
3. the reverse direction starts at step T-1 (in the padding), not at length-1, so even its
   outputs at valid steps differ;
4. in stacked layers (and through the reverse half of a bidirectional layer) the
   difference reaches every later layer's outputs.

The forward direction's Y at valid steps (t < length) of the first layer is the same.
`test_reference_evaluator_ignores_sequence_lens` asserts exactly this on every vector with
lengths.  The vectors' packed semantics are still checked against ONNX, without
sequence_lens: each sequence b is run on its own, X truncated to its length
(`test_vector_through_onnx_reference`), which is what packing means; Y is zero-padded
back to T.  (onnxruntime, not installed here, is not checked.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.converters import ConversionError
from rnnbench.converters.onnx import from_onnx, onnx_attributes, to_onnx
from rnnbench.core.tolerances import assert_close, bounds, case_sizes, max_errors

onnx = pytest.importorskip("onnx")
vectors = pytest.importorskip("rnnbench.vectors", reason="shared vectors have not landed in this checkout")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

DTYPE = "float64"  # the reference evaluator runs LSTM/GRU in X's dtype; tensor(double) is allowed
ELEM = {"float64": TensorProto.DOUBLE, "float32": TensorProto.FLOAT}
INPUT_SLOTS = {"LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
               "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h")}
OUTPUT_SLOTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h")}

CASES = {case.name: case for case in vectors.load_cases()}


def onnx_reason(spec) -> str | None:
    """None when ONNX can hold the spec, else the converter's ConversionError text."""
    try:
        onnx_attributes(spec)
    except ConversionError as e:
        return str(e)
    return None


REASONS = {name: onnx_reason(case.spec) for name, case in CASES.items()}
REPRESENTABLE = [name for name, reason in REASONS.items() if reason is None]
WITH_LENGTHS = [name for name in REPRESENTABLE if CASES[name].lengths is not None]


# ---- one node, one model --------------------------------------------------------------------

def run_node(node: dict, X, *, initial_h=None, initial_c=None, sequence_lens=None) -> dict:
    """Run one converted layer (W, R, B, P, attributes) through ReferenceEvaluator."""
    op = node["op_type"]
    dtype = X.dtype
    feeds = {"X": X, "W": node["W"].astype(dtype), "R": node["R"].astype(dtype), "B": node["B"].astype(dtype),
             "sequence_lens": None if sequence_lens is None else np.asarray(sequence_lens, dtype=np.int32),
             "initial_h": initial_h, "initial_c": initial_c,
             "P": None if node.get("P") is None else node["P"].astype(dtype)}
    feeds = {k: v for k, v in feeds.items() if k in INPUT_SLOTS[op] and v is not None}
    names = [slot if slot in feeds else "" for slot in INPUT_SLOTS[op]]
    while names and not names[-1]:
        names.pop()
    elem = ELEM[str(dtype)]
    graph_inputs = [helper.make_tensor_value_info(
        k, TensorProto.INT32 if k == "sequence_lens" else elem, list(feeds[k].shape)) for k in names if k]
    outputs = list(OUTPUT_SLOTS[op])
    D, H = node["R"].shape[0], node["R"].shape[2]
    if node["attributes"].get("layout", 0):  # X [B, T, I]
        shapes = {"Y": [X.shape[0], X.shape[1], D, H], "Y_h": [X.shape[0], D, H]}
    else:  # X [T, B, I]
        shapes = {"Y": [X.shape[0], D, X.shape[1], H], "Y_h": [D, X.shape[1], H]}
    shapes["Y_c"] = shapes["Y_h"]
    graph_outputs = [helper.make_tensor_value_info(k, elem, shapes[k]) for k in outputs]
    onnx_node = helper.make_node(op, names, outputs, **node["attributes"])
    model = helper.make_model(helper.make_graph([onnx_node], f"{op.lower()}_layer", graph_inputs, graph_outputs),
                              opset_imports=[helper.make_opsetid("", onnx.defs.get_schema(op).since_version)])
    onnx.checker.check_model(model, full_check=True)
    results = ReferenceEvaluator(model).run(None, feeds)
    out = dict(zip(outputs, results))
    assert all(v.dtype == dtype for v in out.values()), {k: v.dtype for k, v in out.items()}
    return out


def onnx_stack(spec, nodes, x, h0=None, c0=None, lengths=None, *, sequence_lens: bool = True) -> dict:
    """The whole model through ONNX, one node per layer, stacked in Python.

    Returns output/h_n/c_n in the canonical layout.  Batch-first specs run layout=1 nodes.
    `lengths` is passed as sequence_lens when `sequence_lens` is True.
    """
    D, H, L = spec.num_directions, spec.hidden_size, spec.num_layers
    layout = 1 if spec.batch_first else 0
    B = x.shape[0] if layout else x.shape[1]
    h_n, c_n = np.zeros((L * D, B, H)), np.zeros((L * D, B, H))
    layer_x = x
    for k, node in enumerate(nodes):
        node = {**node, "attributes": {**node["attributes"], "layout": layout}}
        states = {}
        for key, value in (("initial_h", h0), ("initial_c", c0)):
            if value is not None:
                rows = value[k * D:(k + 1) * D]  # [D, B, H]
                states[key] = rows.transpose(1, 0, 2) if layout else rows
        r = run_node(node, layer_x, sequence_lens=lengths if sequence_lens else None, **states)
        Y = r["Y"]  # [T, D, B, H] (layout 0) or [B, T, D, H] (layout 1)
        layer_x = Y.reshape(*Y.shape[:2], D * H) if layout else Y.transpose(0, 2, 1, 3).reshape(
            Y.shape[0], Y.shape[2], D * H)
        for out, key in ((h_n, "Y_h"), (c_n, "Y_c")):
            if key in r:
                out[k * D:(k + 1) * D] = r[key].transpose(1, 0, 2) if layout else r[key]
    result = {"output": layer_x, "h_n": h_n}
    if spec.family == "lstm":
        result["c_n"] = c_n
    return result


def onnx_packed(spec, nodes, x, h0, c0, lengths) -> dict:
    """Packed-sequence semantics from ONNX without sequence_lens: each sequence on its own,
    X truncated to its length; output zero-padded back to T."""
    time_axis, batch_axis = (1, 0) if spec.batch_first else (0, 1)
    T = x.shape[time_axis]
    parts = []
    for b, length in enumerate(lengths):
        xb = np.take(x, [b], axis=batch_axis)
        xb = np.take(xb, np.arange(int(length)), axis=time_axis)
        r = onnx_stack(spec, nodes, xb, None if h0 is None else h0[:, b:b + 1],
                       None if c0 is None else c0[:, b:b + 1])
        pad = [(0, 0)] * 3
        pad[time_axis] = (0, T - int(length))
        r["output"] = np.pad(r["output"], pad)
        parts.append(r)
    return {key: np.concatenate([p[key] for p in parts], axis=batch_axis if key == "output" else 1)
            for key in parts[0]}


# ---- the vectors ----------------------------------------------------------------------------

def test_onnx_version_and_float64_support():
    assert onnx.__version__ == "1.23.2"
    for op in ("LSTM", "GRU"):
        allowed = {t.type_param_str: t.allowed_type_strs for t in onnx.defs.get_schema(op).type_constraints}
        assert "tensor(double)" in allowed["T"]
    assert REPRESENTABLE and len(REPRESENTABLE) + sum(r is not None for r in REASONS.values()) == len(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_vector_through_onnx_reference(name):
    case = CASES[name]
    if REASONS[name] is not None:
        pytest.skip(f"ONNX cannot represent {name}: {REASONS[name]}")
    spec = case.spec
    nodes = to_onnx(spec, case.params)
    if case.lengths is None:
        got = onnx_stack(spec, nodes, case.x, case.h0, case.c0)
        how = "full batch"
    else:
        got = onnx_packed(spec, nodes, case.x, case.h0, case.c0, case.lengths)
        how = "per sequence, truncated to its length (the evaluator ignores sequence_lens)"
    errors = assert_close(case.expected, got, DTYPE, f"ONNX reference evaluator on {name} ({how})",
                          spec=spec, x=case.x)
    print(f"{name}: ONNX ReferenceEvaluator ({DTYPE}, {how}) max errors {errors}")


@pytest.mark.parametrize("name", [n for n in REPRESENTABLE if CASES[n].spec.batch_first])
def test_layout_1_nodes_convert_back(name):
    """The layout=1 nodes run above read back into the same canonical parameters."""
    case = CASES[name]
    nodes = [{**n, "attributes": {**n["attributes"], "layout": 1}} for n in to_onnx(case.spec, case.params)]
    back = from_onnx(case.spec, nodes)
    assert all(np.array_equal(back[k], case.params[k]) for k in case.params)
    time_major = dataclasses.replace(case.spec, batch_first=False)
    with pytest.raises(ConversionError, match="layout=1.*batch_first=True"):
        from_onnx(time_major, nodes)


@pytest.mark.parametrize("name", WITH_LENGTHS)
def test_reference_evaluator_ignores_sequence_lens(name):
    """What ONNX 1.23.2's evaluator does with sequence_lens: nothing (see the module docstring)."""
    case = CASES[name]
    spec = case.spec
    nodes = to_onnx(spec, case.params)
    with_lens = onnx_stack(spec, nodes, case.x, case.h0, case.c0, case.lengths)
    without = onnx_stack(spec, nodes, case.x, case.h0, case.c0, case.lengths, sequence_lens=False)
    for key in with_lens:
        np.testing.assert_array_equal(with_lens[key], without[key], err_msg=f"{name}: {key}")
    # = the float64 reference run over all T steps of every sequence
    full = reference.run_case(spec, case.params, case.x, case.h0, case.c0, lengths=None)
    assert_close(full, with_lens, DTYPE, f"{name}: ONNX with sequence_lens vs the full-length reference",
                 spec=spec, x=case.x)

    T = case.x.shape[1 if spec.batch_first else 0]
    short = case.lengths < T
    errors = max_errors(case.expected, with_lens)
    print(f"{name}: ONNX with sequence_lens {case.lengths.tolist()} (T={T}) vs packed semantics: {errors}")
    if not short.any():  # every length is T: nothing to differ
        assert_close(case.expected, with_lens, DTYPE, name, spec=spec, x=case.x)
        return
    atol = max(bounds(case.expected, DTYPE, spec, *case_sizes(spec, case.x)).values())  # the largest bound
    out = with_lens["output"] if not spec.batch_first else with_lens["output"].transpose(1, 0, 2)
    want = case.expected["output"] if not spec.batch_first else case.expected["output"].transpose(1, 0, 2)
    steps = np.arange(T)[:, None]
    valid = steps < case.lengths[None, :]  # (T, B)
    H, D = spec.hidden_size, spec.num_directions
    # 1. past a length, Y is not zero (it is the RNN running on over the padding)
    assert np.all(want[~valid] == 0)
    assert np.abs(out[~valid]).max() > atol
    # 2. the final states of the short sequences are the states after step T-1
    last = spec.num_layers * D - D  # last layer's forward row
    assert np.abs(with_lens["h_n"][last][short] - case.expected["h_n"][last][short]).max() > atol
    if spec.num_layers == 1:
        # the first layer's forward direction agrees at valid steps ...
        assert_close({"y": want[..., :H][valid]}, {"y": out[..., :H][valid]}, DTYPE, f"{name}: forward, valid steps",
                     spec=spec, x=case.x)
        if D == 2:  # 3. ... its reverse direction, which starts in the padding, does not
            b = np.flatnonzero(short)
            assert np.abs(out[..., H:][:, b][valid[:, b]] - want[..., H:][:, b][valid[:, b]]).max() > atol
