"""ONNX's own backend node test cases for `LSTM` and `GRU`, run on every implementation.

Upstream (the onnx 1.23.2 wheel, pinned in requirements.txt), imported at run time, never
copied, so the expectations are exactly ONNX 1.23.2's:

- `onnx/backend/test/case/node/lstm.py`: class `LSTM(Base)`, its `export_*` functions
  (and `LSTMHelper`, the NumPy model that computed the expected outputs);
- `onnx/backend/test/case/node/gru.py`: class `GRU(Base)`, `export_*` (and `GRUHelper`);
- `onnx/backend/test/case/node/__init__.py`: `expect(node, inputs, outputs, name)`, which
  each export calls once.  We call each export ourselves with `expect` swapped for a
  recorder (and `np.random.seed(0)` first, as `onnx/backend/test/case/base.py`'s
  `_Exporter` does, so `test_gru_seq_length`'s random weights are ONNX's own), getting
  the NodeProto, its inputs and ONNX's expected outputs.  (`collect_testcases("LSTM")`
  gives the same cases but imports every operator's cases: 8 s.)

Each case's node is turned into canonical parameters with `rnnbench.converters.onnx.read_onnx`
(cell from op_type / P / linear_before_reset; layout=1 -> a `batch_first=True` spec, which
the converter accepts since this file found it refusing every layout=1 node), then
X, initial_h, initial_c, sequence_lens go to every registered implementation that runs on
cpu and supports the configuration (`unsupported_reason`; the others are skipped with their
reason) and Y / Y_h / Y_c are compared with ONNX's expected outputs, in ONNX's layout.

Cases adapted (id = ONNX's test name; cell read from the node):

==============================  =====================  =====================================
test_lstm_defaults              lstm                   X, W, R only; Y_h
test_lstm_with_initial_bias     lstm                   B = [Wb = 0.1, Rb = 0]
test_lstm_with_peepholes        peephole_lstm          P, sequence_lens (all = T), initial_h/c
test_lstm_batchwise             lstm, batch_first      layout=1; Y and Y_h
test_lstm_bidirectional         lstm, bidirectional    different W/R per direction; Y_h, Y_c
test_gru_defaults               gru_reset_before       linear_before_reset absent = 0
test_gru_with_initial_bias      gru_reset_before       B = [Wb = 0.1, Rb = 0]
test_gru_seq_length             gru_reset_before       random W, R, B (seed 0), T=2, B=3
test_gru_batchwise              gru_reset_before,      layout=1; Y and Y_h
                                batch_first
test_gru_bidirectional          gru_reset_before,      Y and Y_h
                                bidirectional
==============================  =====================  =====================================

Every ONNX GRU case leaves `linear_before_reset` at ONNX's default 0, so all of them are
the `gru_reset_before` cell (PyTorch's nn.GRU is linear_before_reset=1 and runs none of
them; the implementations of that cell are torch.eager, torch.compile, torch.scan, jax.scan, jax.bptt).

Every implementation runs every adapted case, but torch.scan (whose compile of a forward and
backward scan costs the most per configuration) runs `SCAN_CASES`: a case of each cell, the
bidirectional one where the cell has one.

Cases that cannot apply (`test_cases_that_cannot_apply_raise_conversion_error` asserts
that the converter raises `ConversionError` naming the attribute, instead of converting
something else):

- test_lstm_reverse, test_gru_reverse: `direction="reverse"` (one direction, run from
  the last step to the first).  A canonical model is forward or bidirectional (forward +
  reverse); no spec has a reverse-only layer.  (`test_reverse_cases_are_forward_on_the_flipped_input`
  shows what such a node computes: the forward model on X flipped in time, Y flipped back.)

There are no LSTM/GRU backend cases in 1.23.2 with non-default activations, clip or
input_forget (the operator has them; the reference evaluator ignores them, see
onnx/reference/ops/op_lstm.py's "TODO: support overridden attributes"); the converter's
refusal of those is covered on these nodes too (`test_unrepresentable_attributes_raise`).

Precision: ONNX's expected outputs are float32, computed by LSTMHelper/GRUHelper in
float32 NumPy, so they are only float32-accurate: they differ from the float64 reference
run on the same (exactly converted) weights and inputs by 1e-8 to 7e-8, far above the
float64 bound of the tolerance rule (`test_onnx_expected_outputs_are_float32_accurate`
measures and asserts that).  Implementations therefore run in the case's dtype, float32,
and are held to the rule's float32 bound (`rnnbench.core.tolerances`); measured errors are 0 to
2.4e-7.

What these cases cannot catch: every LSTM case (and every GRU case but
test_gru_seq_length) has W = scale * ones, R = scale * ones and equal biases per gate, so
all gates see the same pre-activation and a wrong gate order in the converter or an
implementation goes unnoticed (test_lstm_with_peepholes has P = 0.1 * ones, so the P_i,
P_o, P_f order neither); no case has linear_before_reset=1 (PyTorch's GRU) or
sequence_lens shorter than T.  `tests/peer/test_onnx_reference.py` covers those with
random weights through ONNX's reference evaluator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.core import registry
from rnnbench.converters import ConversionError
from rnnbench.converters.onnx import read_onnx
from rnnbench.core.tolerances import DTYPES, assert_close, bounds, case_sizes

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.backend.test.case.node import gru as onnx_gru_cases  # noqa: E402
from onnx.backend.test.case.node import lstm as onnx_lstm_cases  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py

# The operator's input and output slots, in order (an empty name in the node = absent).
INPUT_SLOTS = {"LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
               "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h")}
OUTPUT_SLOTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h")}


@dataclass(frozen=True)
class OnnxCase:
    name: str
    op_type: str
    attributes: dict  # decoded: str instead of bytes
    inputs: dict  # slot name -> array, present inputs only
    expected: dict  # slot name ("Y", "Y_h", "Y_c") -> array, present outputs only

    @property
    def layout(self) -> int:
        return int(self.attributes.get("layout", 0))

    @property
    def dtype(self) -> str:
        return str(self.inputs["X"].dtype)

    def node_dict(self) -> dict:
        """The converter's node dict: op_type, W, R, B, P, attributes."""
        node = {"op_type": self.op_type, "attributes": dict(self.attributes)}
        node.update({k: self.inputs[k] for k in ("W", "R", "B", "P") if k in self.inputs})
        return node


def _decode(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _record_cases(module, class_name: str) -> list[OnnxCase]:
    """Run every `export_*` of ONNX's case class with `expect` replaced by a recorder."""
    recorded: list[OnnxCase] = []

    def record(node, inputs, outputs, name, **_kwargs):
        present_in = [(slot, n) for slot, n in zip(INPUT_SLOTS[node.op_type], node.input) if n]
        present_out = [(slot, n) for slot, n in zip(OUTPUT_SLOTS[node.op_type], node.output) if n]
        assert len(present_in) == len(inputs) and len(present_out) == len(outputs), name
        recorded.append(OnnxCase(
            name=name, op_type=node.op_type,
            attributes={a.name: _decode(helper.get_attribute_value(a)) for a in node.attribute},
            inputs={slot: np.asarray(a) for (slot, _), a in zip(present_in, inputs)},
            expected={slot: np.asarray(a) for (slot, _), a in zip(present_out, outputs)}))

    cls = getattr(module, class_name)
    original, state = module.expect, np.random.get_state()
    module.expect = record
    try:
        for attr, export in vars(cls).items():  # definition order
            if attr.startswith("export"):
                np.random.seed(0)  # as onnx/backend/test/case/base.py's _Exporter does
                getattr(cls, attr)()
    finally:
        module.expect = original
        np.random.set_state(state)
    return recorded


CASES = {c.name: c for c in _record_cases(onnx_lstm_cases, "LSTM") + _record_cases(onnx_gru_cases, "GRU")}

ADAPTED = ("test_lstm_defaults", "test_lstm_with_initial_bias", "test_lstm_with_peepholes", "test_lstm_batchwise",
           "test_lstm_bidirectional", "test_gru_defaults", "test_gru_with_initial_bias", "test_gru_seq_length",
           "test_gru_batchwise", "test_gru_bidirectional")
SCAN_CASES = ("test_lstm_bidirectional", "test_lstm_with_peepholes", "test_gru_bidirectional")
CANNOT_APPLY = {
    "test_lstm_reverse": ("direction", "direction='reverse' (a reverse-only layer): a canonical layer is forward "
                                       "or bidirectional"),
    "test_gru_reverse": ("direction", "direction='reverse' (a reverse-only layer): a canonical layer is forward "
                                      "or bidirectional"),
}
EXPECTED_CELL = {"test_lstm_defaults": "lstm", "test_lstm_with_initial_bias": "lstm",
                 "test_lstm_with_peepholes": "peephole_lstm", "test_lstm_batchwise": "lstm",
                 "test_lstm_bidirectional": "lstm", "test_gru_defaults": "gru_reset_before",
                 "test_gru_with_initial_bias": "gru_reset_before", "test_gru_seq_length": "gru_reset_before",
                 "test_gru_batchwise": "gru_reset_before", "test_gru_bidirectional": "gru_reset_before"}


def convert(case: OnnxCase):
    """(spec, params) of the case's node; layout=1 -> a batch_first spec."""
    return read_onnx([case.node_dict()], batch_first=case.layout == 1)


def run_inputs(case: OnnxCase, spec) -> dict:
    """`run_case` keyword arguments x, h0, c0, lengths from the ONNX inputs."""
    x = case.inputs["X"]  # [T, B, I] (layout 0) or [B, T, I] (layout 1) = the spec's layout
    states = {}
    for slot, key in (("initial_h", "h0"), ("initial_c", "c0")):
        if slot in case.inputs:  # [D, B, H], or [B, D, H] with layout 1 -> (L*D, B, H), L = 1
            s = case.inputs[slot]
            states[key] = s.transpose(1, 0, 2) if case.layout == 1 else s
    if spec.family == "lstm" and states and len(states) == 1:  # run_case wants h0 and c0 together
        given = next(iter(states.values()))
        states.setdefault("h0", np.zeros_like(given))
        states.setdefault("c0", np.zeros_like(given))
    lengths = case.inputs.get("sequence_lens")
    return dict(x=x, h0=states.get("h0"), c0=states.get("c0"),
                lengths=None if lengths is None else np.asarray(lengths, dtype=np.int64))


def as_onnx_outputs(case: OnnxCase, spec, got: dict) -> dict:
    """Canonical outputs (output, h_n, c_n) in ONNX's layout, for the outputs the node has."""
    D, H = spec.num_directions, spec.hidden_size
    out = np.asarray(got["output"])
    if case.layout == 1:  # output (B, T, D*H) -> Y [B, T, D, H]; states (D, B, H) -> [B, D, H]
        onnx_out = {"Y": out.reshape(out.shape[0], out.shape[1], D, H),
                    "Y_h": np.asarray(got["h_n"]).transpose(1, 0, 2)}
        if "c_n" in got:
            onnx_out["Y_c"] = np.asarray(got["c_n"]).transpose(1, 0, 2)
    else:  # output (T, B, D*H) -> Y [T, D, B, H]
        onnx_out = {"Y": out.reshape(out.shape[0], out.shape[1], D, H).transpose(0, 2, 1, 3),
                    "Y_h": np.asarray(got["h_n"])}
        if "c_n" in got:
            onnx_out["Y_c"] = np.asarray(got["c_n"])
    return {k: onnx_out[k] for k in case.expected}


# ---- the inventory --------------------------------------------------------------------------

def test_inventory_is_onnx_1_23_2s_lstm_and_gru_cases():
    """Every ONNX LSTM/GRU node case is either adapted or listed as not applicable."""
    assert sorted(CASES) == sorted(ADAPTED + tuple(CANNOT_APPLY)), (
        "ONNX's LSTM/GRU backend cases changed (onnx upgraded?): classify the new ones in this file")
    assert onnx.__version__ == "1.23.2"


@pytest.mark.parametrize("name", ADAPTED)
def test_node_converts_to_the_expected_cell(name):
    case = CASES[name]
    spec, params = convert(case)
    assert spec.cell == EXPECTED_CELL[name]
    assert spec.batch_first == (case.layout == 1)
    assert spec.bidirectional == (case.attributes.get("direction") == "bidirectional")
    assert set(params) == set(spec.param_names())


@pytest.mark.parametrize("name", sorted(CANNOT_APPLY))
def test_cases_that_cannot_apply_raise_conversion_error(name):
    attribute, _why = CANNOT_APPLY[name]
    with pytest.raises(ConversionError, match=f"attribute {attribute}="):
        convert(CASES[name])


@pytest.mark.parametrize("name", ["test_lstm_defaults", "test_gru_defaults"])
def test_unrepresentable_attributes_raise(name):
    """The operator options no canonical cell has are refused on these nodes as well."""
    case = CASES[name]
    base = case.node_dict()
    acts = {"LSTM": ["Sigmoid", "Tanh", "Relu"], "GRU": ["Sigmoid", "Relu"]}[case.op_type]
    variants = {"clip": {"clip": 1.0}, "activations": {"activations": acts}, "layout": {"layout": 1},
                "direction": {"direction": "reverse"}}
    if case.op_type == "LSTM":
        variants["input_forget"] = {"input_forget": 1}
    for what, extra in variants.items():
        node = {**base, "attributes": {**base["attributes"], **extra}}
        with pytest.raises(ConversionError, match=what):
            read_onnx([node])  # batch_first=False: layout=1 does not fit


# ---- ONNX's expected outputs versus the float64 reference ------------------------------------

@pytest.mark.parametrize("name", ADAPTED)
def test_onnx_expected_outputs_are_float32_accurate(name):
    """The float64 reference on the converted (exact) weights reproduces ONNX's expected
    outputs to float32 accuracy: they are float32 NumPy results, not float64 ones."""
    case = CASES[name]
    spec, params = convert(case)
    inputs = run_inputs(case, spec)
    floats = {k: v.astype(np.float64) for k, v in inputs.items() if k != "lengths" and v is not None}
    ref = reference.run_case(spec, params, **{**inputs, **floats})
    errors = assert_close(case.expected, as_onnx_outputs(case, spec, ref), case.dtype,
                          f"{name}: float64 reference vs ONNX's expected outputs", spec=spec, x=inputs["x"])
    print(f"{name}: float64 reference vs ONNX expected ({case.dtype}): max errors {errors}")
    f64 = bounds(case.expected, "float64", spec, *case_sizes(spec, inputs["x"]))
    assert any(errors[k] > f64[k] for k in errors), "ONNX's expected outputs are float32 results"


@pytest.mark.parametrize("name", sorted(CANNOT_APPLY))
def test_reverse_cases_are_forward_on_the_flipped_input(name):
    """What a reverse-only node computes, stated with the reference (not via the converter):
    the forward model on X flipped in time; Y flipped back; Y_h/Y_c after the first step."""
    case = CASES[name]
    node = case.node_dict()
    node["attributes"] = {k: v for k, v in node["attributes"].items() if k != "direction"}
    spec, params = read_onnx([node])
    x = case.inputs["X"].astype(np.float64)[::-1]
    ref = reference.run_case(spec, params, x)
    ref["output"] = ref["output"][::-1]
    assert_close(case.expected, as_onnx_outputs(case, spec, ref), case.dtype, name, spec=spec, x=x)


# ---- every implementation on every adapted case --------------------------------------------

def _impl_cases():
    for name in ADAPTED:
        for impl in registry.names():
            if impl != "torch.scan" or name in SCAN_CASES:
                yield pytest.param(name, impl, id=f"{name}-{impl}")


@pytest.mark.parametrize("name,impl", list(_impl_cases()))
def test_implementation_matches_onnx_node_case(name, impl):
    case = CASES[name]
    if case.dtype not in DTYPES:
        pytest.skip(f"{name}: ONNX's inputs are {case.dtype}; the tolerance rule knows {', '.join(DTYPES)} only")
    spec, params = convert(case)
    inputs = run_inputs(case, spec)
    entry = registry.get(impl)
    reason = entry.unavailable_reason("cpu")
    if reason is None:
        reason = entry.unsupported_reason(spec, lengths=inputs["lengths"] is not None, dtype=case.dtype)
    if reason is not None:
        pytest.skip(f"{impl} cannot run {name} ({spec.cell}, batch_first={spec.batch_first}, "
                    f"bidirectional={spec.bidirectional}, lengths={inputs['lengths'] is not None}): {reason}")
    got = entry.adapter().run_case(spec, params, **inputs, dtype=case.dtype, device="cpu")
    got = as_onnx_outputs(case, spec, got)
    errors = assert_close(case.expected, got, case.dtype, f"{impl} on ONNX's {name} ({spec.cell})",
                          spec=spec, x=inputs["x"])
    print(f"{impl} on {name}: max errors {errors}")
