"""RNNSpec validation and sizes, canonical parameter shapes (vs PyTorch), initialisers,
check_params and split_gates."""

from __future__ import annotations

import numpy as np
import pytest

from rnnbench.core.params import ParamError, check_params, init_params, split_gates
from rnnbench.core.spec import RNNSpec

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kwargs, field, allowed", [
    (dict(cell="rnn"), "cell", "one of"),
    (dict(hidden_size=0), "hidden_size", ">= 1"),
    (dict(input_size=-1), "input_size", ">= 1"),
    (dict(num_layers=0), "num_layers", ">= 1"),
    (dict(hidden_size=2.0), "hidden_size", "integer"),
    (dict(input_size=True), "input_size", "integer"),
    (dict(bias=1), "bias", "bool"),
    (dict(batch_first="yes"), "batch_first", "bool"),
    (dict(bidirectional=None), "bidirectional", "bool"),
    (dict(proj_size=-1), "proj_size", ">= 0"),
    (dict(proj_size=4), "proj_size", r"\[0, hidden_size\) = \[0, 4\)"),
    (dict(proj_size=5), "proj_size", r"\[0, 4\)"),
    (dict(cell="gru", proj_size=2), "proj_size", "only supported for cell in"),
    (dict(dropout=1.5), "dropout", r"\[0, 1\]"),
    (dict(dropout=-0.1), "dropout", r"\[0, 1\]"),
    (dict(dropout="0.1"), "dropout", "number"),
])
def test_invalid_spec_names_the_field_and_allowed_range(kwargs, field, allowed):
    base = dict(cell="lstm", input_size=3, hidden_size=4)
    with pytest.raises(ValueError, match=rf"{field}.*{allowed}"):
        RNNSpec(**{**base, **kwargs})


def test_valid_specs_and_derived_sizes():
    spec = RNNSpec("lstm", 3, 5, num_layers=2, bidirectional=True, proj_size=2)
    assert spec.num_gates == 4 and spec.num_directions == 2
    assert spec.output_hidden_size == 2 and spec.output_size == 4
    assert spec.layer_input_size(0) == 3 and spec.layer_input_size(1) == 4
    assert list(spec.layers_and_directions()) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert spec.state_shapes(7) == {"h": (4, 7, 2), "c": (4, 7, 5)}
    gru = RNNSpec("gru", 3, 5)
    assert gru.num_gates == 3 and gru.state_shapes(2) == {"h": (1, 2, 5)}
    assert RNNSpec.from_dict(spec.to_dict()) == spec
    assert RNNSpec("gru", 1, 1, dropout=1).dropout == 1  # an int dropout in range is accepted


SPECS = [
    RNNSpec("lstm", 3, 4),
    RNNSpec("gru", 3, 4),
    RNNSpec("lstm", 3, 4, num_layers=3, bidirectional=True),
    RNNSpec("gru", 2, 5, num_layers=2, bidirectional=True, bias=False),
    RNNSpec("lstm", 3, 5, proj_size=2),
    RNNSpec("lstm", 3, 6, num_layers=2, bidirectional=True, proj_size=3, bias=False),
    RNNSpec("gru", 1, 1, batch_first=True),
]


def _spec_id(spec: RNNSpec) -> str:
    flags = [f"L{spec.num_layers}"] + [n for n in ("bidirectional", "batch_first") if getattr(spec, n)]
    flags += ([] if spec.bias else ["nobias"]) + ([f"proj{spec.proj_size}"] if spec.proj_size else [])
    return "-".join([spec.cell, f"I{spec.input_size}H{spec.hidden_size}", *flags])


@pytest.mark.parametrize("spec", SPECS, ids=_spec_id)
def test_param_shapes_equal_torch_state_dict_in_order(spec):
    module = (torch.nn.LSTM if spec.cell == "lstm" else torch.nn.GRU)(**spec.torch_kwargs())
    want = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    assert list(spec.param_shapes().items()) == list(want.items())
    assert spec.param_names() == list(want)


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("spec", SPECS, ids=_spec_id)
def test_state_shapes_equal_torch_outputs(spec):
    module = (torch.nn.LSTM if spec.cell == "lstm" else torch.nn.GRU)(**spec.torch_kwargs())
    x = torch.zeros((2, 3, spec.input_size) if spec.batch_first else (3, 2, spec.input_size))
    with torch.no_grad():
        output, state = module(x)
    shapes = spec.state_shapes(2)
    h_n = state[0] if spec.cell == "lstm" else state
    assert tuple(h_n.shape) == shapes["h"]
    assert output.shape[-1] == spec.output_size
    if spec.cell == "lstm":
        assert tuple(state[1].shape) == shapes["c"]


def test_flops_formula():
    spec = RNNSpec("lstm", 3, 5)
    assert spec.flops(7, 2) == 2 * 7 * 2 * 4 * 5 * (3 + 5)
    two = RNNSpec("gru", 3, 5, num_layers=2, bidirectional=True)
    per_dir = [2 * 7 * 2 * 3 * 5 * (3 + 5), 2 * 7 * 2 * 3 * 5 * (10 + 5)]
    assert two.flops(7, 2) == 2 * sum(per_dir)


@pytest.mark.parametrize("spec", SPECS, ids=_spec_id)
def test_pytorch_init_matches_torch_range_and_shapes(spec):
    params = init_params(spec, 0)
    check_params(spec, params)
    bound = 1 / np.sqrt(spec.hidden_size)
    for name, value in params.items():
        assert value.dtype == np.float64
        assert np.all(np.abs(value) <= bound), name
    everything = np.concatenate([v.ravel() for v in params.values()])
    if everything.size > 50:  # uniform, not constant: it spans most of the range
        assert everything.min() < -0.8 * bound and everything.max() > 0.8 * bound
    again = init_params(spec, 0)
    other = init_params(spec, 1)
    assert all(np.array_equal(params[k], again[k]) for k in params)
    assert any(not np.array_equal(params[k], other[k]) for k in params)
    assert init_params(spec, 0, dtype=np.float32)["weight_ih_l0"].dtype == np.float32


@pytest.mark.parametrize("spec", [s for s in SPECS if s.hidden_size > 1], ids=_spec_id)
def test_orthogonal_init(spec):
    params = init_params(spec, 3, scheme="orthogonal")
    check_params(spec, params)
    H = spec.hidden_size
    for layer, direction in spec.layers_and_directions():
        sfx = spec.suffix(layer, direction)
        for block in split_gates(spec, params[f"weight_hh_{sfx}"]).values():  # (H, H_out), H >= H_out
            np.testing.assert_allclose(block.T @ block, np.eye(block.shape[1]), atol=1e-12)
        if spec.proj_size:
            w_hr = params[f"weight_hr_{sfx}"]  # (P, H), P < H: orthonormal rows
            np.testing.assert_allclose(w_hr @ w_hr.T, np.eye(spec.proj_size), atol=1e-12)
        w_ih = params[f"weight_ih_{sfx}"]
        limit = np.sqrt(6.0 / (H + w_ih.shape[1]))  # Xavier-uniform per gate block
        assert np.all(np.abs(w_ih) <= limit)
        if spec.bias:
            b_ih, b_hh = params[f"bias_ih_{sfx}"], params[f"bias_hh_{sfx}"]
            total = split_gates(spec, b_ih + b_hh)
            for gate, value in total.items():
                want = 1.0 if (spec.cell == "lstm" and gate == "f") else 0.0
                np.testing.assert_array_equal(value, np.full(H, want), err_msg=f"{sfx} gate {gate}")


def test_unknown_init_scheme_raises():
    with pytest.raises(ValueError, match="scheme must be 'pytorch' or 'orthogonal'"):
        init_params(SPECS[0], 0, scheme="xavier")


def test_check_params_lists_every_problem_at_once():
    spec = RNNSpec("lstm", 3, 4, num_layers=2)
    params = init_params(spec, 0)
    del params["bias_hh_l1"]
    del params["weight_ih_l0"]
    params["weight_hh_l0"] = np.zeros((16, 5))
    params["bias_ih_l1"] = np.zeros(3)
    params["weight_hr_l0"] = np.zeros((2, 4))
    with pytest.raises(ParamError) as info:
        check_params(spec, params)
    message = str(info.value)
    assert "missing: weight_ih_l0, bias_hh_l1" in message
    assert "unexpected: weight_hr_l0" in message
    assert "weight_hh_l0 has shape (16, 5), expected (16, 4)" in message
    assert "bias_ih_l1 has shape (3,), expected (16,)" in message
    assert isinstance(info.value, ValueError)


def test_check_params_accepts_torch_tensors_and_state_dicts():
    spec = RNNSpec("gru", 3, 4, bidirectional=True)
    module = torch.nn.GRU(**spec.torch_kwargs())
    check_params(spec, module.state_dict())
    with pytest.raises(ParamError, match="missing: bias_ih_l0"):
        check_params(RNNSpec("gru", 3, 4, bidirectional=True), {k: v for k, v in module.state_dict().items()
                                                                if k != "bias_ih_l0"})


def test_split_gates_follows_canonical_gate_order():
    spec = RNNSpec("lstm", 2, 3)
    weight = np.arange(12 * 2).reshape(12, 2)
    gates = split_gates(spec, weight)
    assert list(gates) == ["i", "f", "g", "o"]
    np.testing.assert_array_equal(gates["g"], weight[6:9])
    assert list(split_gates(RNNSpec("gru", 2, 3), np.zeros(9))) == ["r", "z", "n"]
