"""The float64 NumPy reference: gradients vs finite differences, everything vs PyTorch.

PyTorch (`nn.LSTM`/`nn.GRU` in float64, with `pack_padded_sequence` for lengths) is the
ground truth for the forward *and* the gradients, to 1e-12; central finite differences
check the hand-written backward independently of PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared import reference
from shared.params import ParamError, init_params
from shared.spec import RNNSpec

torch = pytest.importorskip("torch")

TORCH_ATOL = 1e-12


def make_case(spec: RNNSpec, T: int, B: int, *, seed: int = 0, initial_state: bool = True,
              lengths=None):
    """Random inputs/params/cotangents for `spec` (standard normal; PyTorch-style init)."""
    rng = np.random.default_rng(seed)
    params = init_params(spec, rng)
    x_shape = (B, T, spec.input_size) if spec.batch_first else (T, B, spec.input_size)
    x = rng.standard_normal(x_shape)
    shapes = spec.state_shapes(B)
    h0 = rng.standard_normal(shapes["h"]) if initial_state else None
    c0 = rng.standard_normal(shapes["c"]) if initial_state and spec.cell == "lstm" else None
    lengths = None if lengths is None else np.asarray(lengths, dtype=np.int64)
    out_shape = x_shape[:2] + (spec.output_size,)
    cot = {"output": rng.standard_normal(out_shape), "h_n": rng.standard_normal(shapes["h"])}
    if spec.cell == "lstm":
        cot["c_n"] = rng.standard_normal(shapes["c"])
    return dict(params=params, x=x, h0=h0, c0=c0, lengths=lengths), cot


def run_torch(spec: RNNSpec, params, x, h0=None, c0=None, lengths=None, cotangents=None, *,
              dtype: str = "float64"):
    """The same dict as `reference.run_case`, computed by torch.nn.LSTM/GRU in `dtype`.

    Results come back as float64 NumPy arrays.  (Also used by tests/test_vectors.py.)
    """
    tdtype = getattr(torch, dtype)

    def tensor(a, grad=False):
        return torch.tensor(np.asarray(a), dtype=tdtype, requires_grad=grad)

    module_cls = torch.nn.LSTM if spec.cell == "lstm" else torch.nn.GRU
    module = module_cls(**spec.torch_kwargs()).to(tdtype)
    module.load_state_dict({k: tensor(v) for k, v in params.items()})
    xt = tensor(x, grad=True)
    states = []
    if h0 is not None:
        states.append(tensor(h0, grad=True))
        if spec.cell == "lstm":
            states.append(tensor(c0, grad=True))
    hx = None if not states else (tuple(states) if spec.cell == "lstm" else states[0])
    inp = xt
    if lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(
            xt, torch.tensor(np.asarray(lengths)), batch_first=spec.batch_first, enforce_sorted=False)
    out, hn = module(inp, hx)
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(
            out, batch_first=spec.batch_first, total_length=x.shape[1 if spec.batch_first else 0])
    result = {"output": out, "h_n": hn[0] if spec.cell == "lstm" else hn}
    if spec.cell == "lstm":
        result["c_n"] = hn[1]
    if cotangents is not None:
        loss = sum((result[k] * tensor(cotangents[k])).sum() for k in result)
        loss.backward()
    grads = {}
    if cotangents is not None:
        grads["grad/x"] = xt.grad
        if states:
            grads["grad/h0"] = states[0].grad
            if spec.cell == "lstm":
                grads["grad/c0"] = states[1].grad
        for name, p in module.named_parameters():
            grads[f"grad/{name}"] = p.grad
    result.update(grads)
    return {k: v.detach().double().numpy() for k, v in result.items()}


# (spec, T, B, lengths, initial_state): every option alone and combined.
CONFIGS = []
for _cell in ("lstm", "gru"):
    CONFIGS += [
        (RNNSpec(_cell, 3, 4), 5, 3, None, False),
        (RNNSpec(_cell, 3, 4), 5, 3, None, True),
        (RNNSpec(_cell, 3, 4, num_layers=2), 4, 2, None, True),
        (RNNSpec(_cell, 3, 4, bidirectional=True), 4, 3, None, True),
        (RNNSpec(_cell, 3, 4, batch_first=True), 4, 3, None, True),
        (RNNSpec(_cell, 3, 4, bias=False), 4, 3, None, True),
        (RNNSpec(_cell, 3, 4), 5, 4, [3, 5, 1, 2], True),
        (RNNSpec(_cell, 3, 4, bidirectional=True), 5, 4, [3, 5, 1, 2], False),
        (RNNSpec(_cell, 2, 3, num_layers=3, bidirectional=True, batch_first=True, bias=False),
         4, 3, [4, 1, 2], True),
        (RNNSpec(_cell, 1, 1), 1, 1, None, True),
    ]
CONFIGS += [
    (RNNSpec("lstm", 3, 4, proj_size=2), 4, 3, None, True),
    (RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True, proj_size=3), 5, 4, [2, 5, 1, 4], True),
    (RNNSpec("lstm", 2, 5, num_layers=3, bidirectional=True, batch_first=True, proj_size=2),
     4, 3, [4, 1, 3], True),
]


def _config_id(config):
    spec, T, B, lengths, init = config
    parts = [spec.cell, f"L{spec.num_layers}"]
    parts += [name for name in ("bidirectional", "batch_first") if getattr(spec, name)]
    parts += [] if spec.bias else ["nobias"]
    parts += [f"proj{spec.proj_size}"] if spec.proj_size else []
    parts += ["lengths"] if lengths is not None else []
    parts += ["h0"] if init else []
    return "-".join(parts + [f"T{T}B{B}I{spec.input_size}H{spec.hidden_size}"])


@pytest.mark.parametrize("config", CONFIGS, ids=_config_id)
def test_matches_torch_forward_and_gradients(config):
    spec, T, B, lengths, init = config
    inputs, cot = make_case(spec, T, B, seed=1, initial_state=init, lengths=lengths)
    want = run_torch(spec, **inputs, cotangents=cot)
    got = reference.run_case(spec, **inputs, cotangents=cot)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == np.float64, key
        assert got[key].shape == want[key].shape, key
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=TORCH_ATOL, err_msg=key)


def _loss(spec, inputs, cot):
    result = reference.run_case(spec, **inputs)
    return sum(float(np.sum(result[k] * cot[k])) for k in cot)


# Smaller than CONFIGS: finite differences cost two forwards per scalar.
FD_CONFIGS = []
for _cell in ("lstm", "gru"):
    FD_CONFIGS += [
        (RNNSpec(_cell, 3, 3), 4, 2, None, True),
        (RNNSpec(_cell, 2, 3, bias=False), 3, 2, None, False),
        (RNNSpec(_cell, 2, 2, num_layers=2, bidirectional=True, batch_first=True), 3, 3, [3, 1, 2], True),
    ]
FD_CONFIGS += [
    (RNNSpec("lstm", 2, 3, num_layers=2, bidirectional=True, proj_size=1), 3, 3, [2, 3, 1], True),
    (RNNSpec("lstm", 2, 3, num_layers=3, bidirectional=True, proj_size=2, bias=False), 3, 2, [1, 3], True),
]


@pytest.mark.parametrize("config", FD_CONFIGS, ids=_config_id)
def test_backward_matches_central_finite_differences(config):
    spec, T, B, lengths, init = config
    inputs, cot = make_case(spec, T, B, seed=2, initial_state=init, lengths=lengths)
    grads = reference.run_case(spec, **inputs, cotangents=cot)
    eps = 1e-6
    targets = [("grad/x", inputs, "x")]
    if init:
        targets.append(("grad/h0", inputs, "h0"))
        if spec.cell == "lstm":
            targets.append(("grad/c0", inputs, "c0"))
    targets += [(f"grad/{name}", inputs["params"], name) for name in inputs["params"]]
    for key, holder, name in targets:
        array = holder[name]
        numeric = np.zeros_like(array)
        for idx in np.ndindex(array.shape):
            original = array[idx]
            array[idx] = original + eps
            plus = _loss(spec, inputs, cot)
            array[idx] = original - eps
            minus = _loss(spec, inputs, cot)
            array[idx] = original
            numeric[idx] = (plus - minus) / (2 * eps)
        # Central differences: truncation O(eps^2) ~ 1e-12, rounding ~ 1e-16/eps ~ 1e-10.
        np.testing.assert_allclose(grads[key], numeric, rtol=1e-7, atol=1e-8, err_msg=key)


def test_outputs_past_length_are_zero_and_states_taken_at_last_valid_step():
    spec = RNNSpec("gru", 2, 3, bidirectional=True)
    inputs, _ = make_case(spec, 6, 3, seed=3, initial_state=False, lengths=[6, 2, 4])
    full = reference.run_case(spec, **inputs)
    for b, length in enumerate(inputs["lengths"]):
        assert np.all(full["output"][length:, b] == 0.0)
        # The sequence alone, truncated to its length, gives the same outputs and states.
        alone = reference.run_case(spec, inputs["params"], inputs["x"][:length, b:b + 1])
        np.testing.assert_allclose(full["output"][:length, b], alone["output"][:, 0], atol=1e-15)
        np.testing.assert_allclose(full["h_n"][:, b], alone["h_n"][:, 0], atol=1e-15)


def test_grad_h0_c0_only_when_given():
    spec = RNNSpec("lstm", 2, 3)
    inputs, cot = make_case(spec, 3, 2, initial_state=False)
    assert "grad/h0" not in reference.run_case(spec, **inputs, cotangents=cot)
    inputs, cot = make_case(spec, 3, 2, initial_state=True)
    result = reference.run_case(spec, **inputs, cotangents=cot)
    assert {"grad/h0", "grad/c0"} <= set(result)
    gru = RNNSpec("gru", 2, 3)
    inputs, cot = make_case(gru, 3, 2, initial_state=True)
    result = reference.run_case(gru, **inputs, cotangents=cot)
    assert "grad/h0" in result and "grad/c0" not in result and "c_n" not in result


def test_forward_does_not_modify_inputs():
    spec = RNNSpec("lstm", 2, 3, bidirectional=True, batch_first=True)
    inputs, cot = make_case(spec, 4, 2, lengths=[4, 2])
    copies = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items() if k != "params"}
    params = {k: v.copy() for k, v in inputs["params"].items()}
    reference.run_case(spec, **inputs, cotangents=cot)
    for k, v in copies.items():
        np.testing.assert_array_equal(inputs[k], v)
    for k, v in params.items():
        np.testing.assert_array_equal(inputs["params"][k], v)


# ---- bad input ----------------------------------------------------------------------------

def _good(cell="lstm", **spec_kw):
    spec = RNNSpec(cell, 3, 4, **spec_kw)
    inputs, cot = make_case(spec, 5, 2, initial_state=True)
    return spec, inputs, cot


@pytest.mark.parametrize("change, error, match", [
    (dict(x=np.zeros((5, 3))), ValueError, "rank 3"),
    (dict(x=np.zeros((5, 2, 7))), ValueError, "input_size=3"),
    (dict(x=np.zeros((0, 2, 3))), ValueError, "at least one time step"),
    (dict(x=np.array([[["a", "b", "c"]]])), TypeError, "numeric"),
    (dict(h0=np.zeros((1, 3, 4))), ValueError, "h0 has shape"),
    (dict(c0=np.zeros((2, 2, 4))), ValueError, "c0 has shape"),
    (dict(c0=None), ValueError, "h0 and c0 together"),
    (dict(lengths=np.array([5, 6])), ValueError, r"\[1, T\]"),
    (dict(lengths=np.array([0, 5])), ValueError, r"\[1, T\]"),
    (dict(lengths=np.array([5])), ValueError, "shape"),
    (dict(lengths=np.array([5.0, 3.0])), TypeError, "integer"),
])
def test_bad_inputs_raise_clear_errors(change, error, match):
    spec, inputs, _ = _good()
    inputs.update(change)
    with pytest.raises(error, match=match):
        reference.run_case(spec, **inputs)


def test_bad_params_and_cotangents_and_dropout():
    spec, inputs, cot = _good()
    params = dict(inputs["params"])
    del params["bias_hh_l0"]
    with pytest.raises(ParamError, match="missing: bias_hh_l0"):
        reference.run_case(spec, params, inputs["x"])
    with pytest.raises(ValueError, match="unexpected"):
        reference.run_case(spec, **inputs, cotangents={**cot, "extra": cot["h_n"]})
    with pytest.raises(ValueError, match="missing"):
        reference.run_case(spec, **inputs, cotangents={"output": cot["output"], "h_n": cot["h_n"]})
    with pytest.raises(ValueError, match=r"cotangents\['h_n'\] has shape"):
        reference.run_case(spec, **inputs, cotangents={**cot, "h_n": cot["h_n"][:, :1]})
    gru, gru_inputs, _ = _good("gru")
    with pytest.raises(ValueError, match="GRU has no cell state"):
        reference.run_case(gru, **{**gru_inputs, "c0": np.zeros((1, 2, 4))})
    two_layers = RNNSpec("lstm", 3, 4, num_layers=2, dropout=0.5)
    with pytest.raises(ValueError, match="dropout"):
        reference.run_case(two_layers, init_params(two_layers), inputs["x"])
    with pytest.raises(TypeError, match="RNNSpec"):
        reference.run_case(spec.to_dict(), inputs["params"], inputs["x"])


def test_single_layer_dropout_is_a_no_op_like_torch():
    spec = RNNSpec("gru", 3, 4, dropout=0.3)
    inputs, _ = make_case(spec, 4, 2)
    plain = reference.run_case(RNNSpec("gru", 3, 4), **inputs)
    np.testing.assert_array_equal(reference.run_case(spec, **inputs)["output"], plain["output"])
