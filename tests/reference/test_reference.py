"""The float64 NumPy reference: gradients vs finite differences, everything vs PyTorch.

PyTorch (`nn.LSTM`/`nn.GRU` in float64, with `pack_padded_sequence` for lengths) is the
ground truth for the forward *and* the gradients, to 1e-12; central finite differences
check the hand-written backward independently of PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.core.catalogue import CUSTOM_CELLS
from rnnbench.core.params import ParamError, init_params
from rnnbench.core.spec import RNNSpec

torch = pytest.importorskip("torch")

from reference_cases import TORCH_ATOL, make_case, perturb_extras, run_torch, run_torch_cells  # noqa: E402,F401


CONFIGS = []
for _cell in ("lstm", "gru") + CUSTOM_CELLS:  # every cell, every option
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
for _cell in CUSTOM_CELLS:
    FD_CONFIGS += [
        (RNNSpec(_cell, 3, 3), 4, 2, None, True),
        (RNNSpec(_cell, 2, 3, bias=False), 3, 2, None, False),
        (RNNSpec(_cell, 2, 2, num_layers=2, bidirectional=True, batch_first=True), 3, 3, [3, 1, 2], True),
        (RNNSpec(_cell, 2, 2, num_layers=2, bidirectional=True, bias=False), 3, 2, [1, 3], False),
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
        if spec.family == "lstm":
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


# ---- cells as (step, step_backward) pairs ----------------------------------------------------

@pytest.mark.parametrize("spec", [RNNSpec("lstm", 3, 4), RNNSpec("lstm", 3, 4, proj_size=2),
                                  RNNSpec("gru", 3, 4), RNNSpec("ln_lstm", 3, 4),
                                  RNNSpec("peephole_lstm", 3, 4), RNNSpec("gru_reset_before", 3, 4)],
                         ids=lambda s: f"{s.cell}-proj{s.proj_size}")
def test_hand_written_step_backward_matches_the_complex_step(spec):
    """One step, every input and parameter: the hand-written backward against the generic
    complex-step derivative of the same step (exact to rounding, so 1e-13)."""
    rng = np.random.default_rng(7)
    params = init_params(spec, rng)
    perturb_extras(spec, params, rng)
    cell = reference.get_cell_step(spec.cell)
    assert cell.hand_written
    p = reference.stack.step_params(spec, params, 0, 0)
    x = rng.standard_normal((3, spec.input_size))
    state = (rng.standard_normal((3, spec.output_hidden_size)),)
    if spec.family == "lstm":
        state += (rng.standard_normal((3, spec.hidden_size)),)
    new_state, saved = cell.step(x, state, p)
    d_new = tuple(rng.standard_normal(a.shape) for a in new_state)
    hand = {k: np.zeros_like(v) for k, v in p.items()}
    generic = {k: np.zeros_like(v) for k, v in p.items()}
    dx, d_state = cell.step_backward(d_new, saved, p, hand)
    dx_cs, d_state_cs = reference.complex_step_backward(lambda *a: cell.step(*a)[0])(d_new, (x, state), p, generic)
    np.testing.assert_allclose(dx, dx_cs, rtol=0, atol=1e-13)
    for a, b in zip(d_state, d_state_cs, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)
    for key in p:
        np.testing.assert_allclose(hand[key], generic[key], rtol=0, atol=1e-13, err_msg=key)
        assert np.any(hand[key] != 0), f"{key} got no gradient"


def test_sigmoid_is_complex_safe_and_unchanged_for_reals():
    a = np.array([-800.0, -30.0, -1.5, 0.0, 2.0, 40.0, 800.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        real = reference.sigmoid(a)
        cs = reference.sigmoid(a + 1j * 1e-30)
    np.testing.assert_array_equal(real, np.where(a >= 0, 1 / (1 + np.exp(-np.abs(a))),
                                                 np.exp(-np.abs(a)) / (1 + np.exp(-np.abs(a)))))
    np.testing.assert_array_equal(cs.real, real)
    e = np.exp(-np.abs(a))
    np.testing.assert_allclose(cs.imag / 1e-30, e / (1 + e) ** 2, rtol=1e-14, atol=0)  # sigmoid'(a)


def test_layer_norm_matches_torch_and_its_backward_finite_differences():
    rng = np.random.default_rng(3)
    v, gain, bias = rng.standard_normal((3, 8)), 1 + rng.standard_normal(8), rng.standard_normal(8)
    y, v_hat, rstd = reference.layer_norm(v, gain, bias)
    want = torch.nn.functional.layer_norm(torch.tensor(v), (8,), torch.tensor(gain), torch.tensor(bias), eps=1e-5)
    np.testing.assert_allclose(y, want.numpy(), rtol=0, atol=1e-14)
    dy = rng.standard_normal(y.shape)
    dv, dgain, dbias = reference.layer_norm_backward(dy, v_hat, rstd, gain)
    eps = 1e-6
    numeric = np.zeros_like(v)
    for idx in np.ndindex(v.shape):
        plus, minus = v.copy(), v.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric[idx] = np.sum(dy * (reference.layer_norm(plus, gain, bias)[0]
                                    - reference.layer_norm(minus, gain, bias)[0])) / (2 * eps)
    np.testing.assert_allclose(dv, numeric, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(dgain, (dy * v_hat).sum(0), atol=1e-15)
    np.testing.assert_allclose(dbias, dy.sum(0), atol=1e-15)


def test_custom_cell_state_shapes_and_c0_rules():
    peep = RNNSpec("peephole_lstm", 2, 3)
    inputs, cot = make_case(peep, 3, 2, initial_state=True)
    result = reference.run_case(peep, **inputs, cotangents=cot)
    assert {"c_n", "grad/c0", "grad/peephole_l0"} <= set(result)
    with pytest.raises(ValueError, match="h0 and c0 together"):
        reference.run_case(peep, **{**inputs, "c0": None})
    gru = RNNSpec("gru_reset_before", 2, 3)
    inputs, _ = make_case(gru, 3, 2, initial_state=True)
    with pytest.raises(ValueError, match="GRU has no cell state"):
        reference.run_case(gru, **{**inputs, "c0": np.zeros((1, 2, 3))})


def test_errors_name_the_argument_and_its_layout_and_any_real_dtype_is_taken():
    """Each error names what is wrong where (the argument, x's layout); float32 and integer
    arrays are taken as float64, complex ones refused."""
    spec, inputs, cot = _good()
    want = reference.run_case(spec, **inputs, cotangents=cot)
    for cast in (np.float32, np.int64):
        x = np.round(inputs["x"] * 4) if cast is np.int64 else inputs["x"]
        got = reference.run_case(spec, **{**inputs, "x": x.astype(cast)}, cotangents=cot)
        ref = want if cast is np.float32 else reference.run_case(spec, **{**inputs, "x": x}, cotangents=cot)
        np.testing.assert_allclose(got["output"], ref["output"], rtol=1e-6 if cast is np.float32 else 0)
        assert got["output"].dtype == np.float64
    text = np.array([[["a", "b", "c"]]])
    for name, change in [("x", dict(x=text)), ("h0", dict(h0=text)), ("c0", dict(c0=text)),
                         ("params['weight_ih_l0']", dict(params={**inputs["params"], "weight_ih_l0": np.full((16, 3), "a")}))]:
        with pytest.raises(TypeError, match=rf"^{__import__('re').escape(name)} must be a real numeric array"):
            reference.run_case(spec, **{**inputs, **change})
    with pytest.raises(TypeError, match=r"^cotangents\['output'\] must be a real numeric array"):
        reference.run_case(spec, **inputs, cotangents={**cot, "output": cot["output"].astype(complex)})
    with pytest.raises(ValueError, match=r"^x must have rank 3 \(T, B, input_size\), got shape"):
        reference.run_case(spec, **{**inputs, "x": np.zeros((5, 3))})
    batch_first = RNNSpec("lstm", 3, 4, batch_first=True)
    with pytest.raises(ValueError, match=r"^x must have rank 3 \(B, T, input_size\), got shape"):
        reference.run_case(batch_first, init_params(batch_first), np.zeros((5, 3)))
    with pytest.raises(TypeError, match=r"^spec must be an RNNSpec, got dict$"):
        reference.run_case(spec.to_dict(), inputs["params"], inputs["x"])
    two_layers = RNNSpec("lstm", 3, 4, num_layers=2, dropout=0.5)
    with pytest.raises(ValueError, match=r"the reference is deterministic and does not implement dropout "
                                         r"between layers; use dropout=0$"):
        reference.run_case(two_layers, init_params(two_layers), inputs["x"])
    with pytest.raises(ValueError, match=r"^h0 has shape \(1, 3, 4\), expected \(1, 2, 4\) "
                                         r"\(num_layers \* num_directions, B, proj_size or hidden_size\)$"):
        reference.run_case(spec, **{**inputs, "h0": np.zeros((1, 3, 4))})
    with pytest.raises(ValueError, match=r"^c0 has shape \(2, 2, 4\), expected \(1, 2, 4\) "
                                         r"\(num_layers \* num_directions, B, hidden_size\)$"):
        reference.run_case(spec, **{**inputs, "c0": np.zeros((2, 2, 4))})
    gru, gru_inputs, _ = _good("gru")
    with pytest.raises(ValueError, match=r"is a GRU-family cell and a GRU has no cell state$"):
        reference.run_case(gru, **{**gru_inputs, "c0": np.zeros((1, 2, 4))})
