"""Your own cell, worked example (NumPy side): a minimal gated unit (MGU, Zhou et al. 2016).

What a user writes is the first section below: the catalogue entry (`CellDef`) and the
NumPy forward step.  Nothing else: the reference's shared driver gives layers,
bidirectional, batch_first, bias=False, initial states and variable lengths, and the
complex-step method gives exact float64 gradients (no hand-written backward).  The tests
check those gradients against central finite differences and against a torch autograd
version of the cell (float64, 1e-12), over every option.

The torch side (section "rnnbench.torch" at the end) is one more function, the step on the
hoisted input projection, registered with `rnnbench.torch.register_cell`; then
`rnnbench.torch.RNN("mgu", ...)`, the `eager` and `compile` rungs and the torch adapter (so
the parity matrix and benchmarks) run it with every option.  The JAX side (section
"rnnbench.jax") is the same step in `jax.numpy`, registered with `rnnbench.jax.register_cell`;
then `rnnbench.jax.rnn(params, x, cell="mgu", ...)`, `rnnbench.jax.RNN("mgu", ...)` and the
`scan` impl's adapter (jit, grad, vmap) run it with every option.
"""

from __future__ import annotations

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.core.catalogue import CELL_DEFS, CellDef, register_cell
from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec

# ---- what the user writes: tests/own_cell_example.py ----------------------------------------

from own_cell_example import MGU, mgu_step, mgu_step_jax, mgu_step_torch, register_mgu  # noqa: E402,F401

# ---- tests ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def mgu_registered():
    """Register for this module, then leave the process-global tables as they were."""
    had_cell = "mgu" in CELL_DEFS
    register_mgu()
    yield
    reference.CELLS.cells.pop("mgu", None)
    if not had_cell:
        CELL_DEFS.pop("mgu", None)


def test_the_spec_params_and_reference_know_the_new_cell():
    spec = RNNSpec("mgu", 3, 4, num_layers=2, bidirectional=True)
    assert spec.family == "gru" and spec.num_gates == 2
    shapes = spec.param_shapes()
    assert shapes["weight_ih_l0"] == (8, 3) and shapes["weight_hh_l1_reverse"] == (8, 4)
    assert shapes["weight_ih_l1"] == (8, 8) and shapes["bias_hh_l0"] == (8,)
    step = reference.get_cell_step("mgu")
    assert not step.hand_written  # gradients by the complex step
    register_mgu()  # registering the same cell and step again is harmless


def test_forward_equals_the_equations_written_out():
    """One layer, one direction, no lengths: the driver runs the step T times."""
    spec = RNNSpec("mgu", 2, 3)
    rng = np.random.default_rng(0)
    params = init_params(spec, rng)
    x, h = rng.standard_normal((4, 2, 2)), rng.standard_normal((1, 2, 3))
    result = reference.run_case(spec, params, x, h)
    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    H = 3
    W, U, b, c = params["weight_ih_l0"], params["weight_hh_l0"], params["bias_ih_l0"], params["bias_hh_l0"]
    state = h[0]
    for t in range(4):
        f = sig(x[t] @ W[:H].T + b[:H] + state @ U[:H].T + c[:H])
        n = np.tanh(x[t] @ W[H:].T + b[H:] + (f * state) @ U[H:].T + c[H:])
        state = (1 - f) * state + f * n
        np.testing.assert_allclose(result["output"][t], state, rtol=0, atol=1e-15)
    np.testing.assert_allclose(result["h_n"][0], state, rtol=0, atol=1e-15)


# Spec arguments, not RNNSpecs: "mgu" is registered by the fixture, not at collection time
# (the catalogue is process-global; other test modules should not see it).
SPEC_KWARGS = [
    dict(input_size=3, hidden_size=3),
    dict(input_size=2, hidden_size=3, bias=False),
    dict(input_size=2, hidden_size=2, num_layers=2, bidirectional=True, batch_first=True),
    dict(input_size=2, hidden_size=2, num_layers=2, bidirectional=True, bias=False),
]


def _kw_id(kw):
    return "-".join(f"{k}={v}" for k, v in kw.items() if k not in ("input_size", "hidden_size")) or "default"


@pytest.mark.parametrize("kwargs", SPEC_KWARGS, ids=_kw_id)
def test_complex_step_gradients_match_finite_differences(kwargs):
    """x, h0 and every parameter, with lengths (T, 1, ...) so the packed paths run."""
    spec = RNNSpec("mgu", **kwargs)
    errors = reference.check_gradients(spec, seq_len=3, batch=3, seed=1)
    assert set(errors) == {"grad/x", "grad/h0", *(f"grad/{p}" for p in spec.param_names())}
    assert max(errors.values()) < 1e-7


def test_a_step_that_is_not_complex_safe_is_caught():
    """np.abs kills the imaginary part: check_gradients says so instead of passing silently."""
    def bad_step(x, state, p):
        (h,) = mgu_step(x, state, p)
        return (np.abs(h) * np.sign(h.real),)  # same values, but not complex-analytic

    bad = CellDef("mgu_not_complex_safe", "gru", ("f", "n"), "broken on purpose", MGU.equations)
    register_cell(bad)
    try:
        reference.register_cell_step(bad.name, bad_step)
        with pytest.raises(AssertionError, match="complex-safe"):
            reference.check_gradients(RNNSpec(bad.name, 2, 2), seq_len=2, batch=2)
    finally:
        reference.CELLS.cells.pop(bad.name, None)
        CELL_DEFS.pop(bad.name, None)


def test_registration_errors_are_clear():
    with pytest.raises(ValueError, match="register its CellDef first"):
        reference.register_cell_step("not_in_catalogue", mgu_step)
    with pytest.raises(ValueError, match="a different NumPy reference step is already registered for cell 'mgu'"):
        reference.register_cell_step("mgu", lambda x, state, p: state)
    lonely = CellDef("mgu_without_step", "gru", ("f", "n"), "no NumPy step", MGU.equations)
    register_cell(lonely)
    try:
        with pytest.raises(ValueError, match=r"has no NumPy reference step; add one with "
                                             r"rnnbench.reference.register_cell_step\('mgu_without_step', step\)"):
            reference.run_case(RNNSpec(lonely.name, 2, 2), init_params(RNNSpec(lonely.name, 2, 2)),
                               np.zeros((1, 1, 2)))
    finally:
        CELL_DEFS.pop(lonely.name, None)


# ---- the same cell in torch autograd: an independent check -------------------------------------

torch = pytest.importorskip("torch")


def torch_mgu_step(x, state, p):
    (h,) = state
    W_if, W_in = p["weight_ih"].chunk(2)
    W_hf, W_hn = p["weight_hh"].chunk(2)
    b_if, b_in = p["bias_ih"].chunk(2)
    b_hf, b_hn = p["bias_hh"].chunk(2)
    f = torch.sigmoid(x @ W_if.T + b_if + h @ W_hf.T + b_hf)
    n = torch.tanh(x @ W_in.T + b_in + (f * h) @ W_hn.T + b_hn)
    return ((1 - f) * h + f * n,)


TORCH_CONFIGS = [  # (spec kwargs, T, B, lengths, initial_state)
    (dict(input_size=3, hidden_size=4), 5, 3, None, False),
    (dict(input_size=3, hidden_size=4, bias=False), 4, 3, None, True),
    (dict(input_size=3, hidden_size=4, batch_first=True), 4, 2, None, True),
    (dict(input_size=3, hidden_size=4, bidirectional=True), 5, 4, [3, 5, 1, 2], True),
    (dict(input_size=2, hidden_size=3, num_layers=3, bidirectional=True, batch_first=True, bias=False),
     4, 3, [4, 1, 2], True),
]


@pytest.mark.parametrize("config", TORCH_CONFIGS,
                         ids=lambda c: f"{_kw_id(c[0])}-len{int(c[3] is not None)}-h0{int(c[4])}")
def test_matches_torch_autograd(config):
    from reference_cases import make_case, run_torch_cells

    kwargs, T, B, lengths, init = config
    spec = RNNSpec("mgu", **kwargs)
    inputs, cot = make_case(spec, T, B, seed=4, initial_state=init, lengths=lengths)
    want = run_torch_cells(spec, **inputs, cotangents=cot, step=torch_mgu_step)
    got = reference.run_case(spec, **inputs, cotangents=cot)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-12, err_msg=key)


# ---- rnnbench.torch: the user's step is mgu_step_torch (tests/own_cell_example.py) -------------

@pytest.fixture(scope="module")
def mgu_in_torch(mgu_registered):
    import rnnbench.torch
    import rnnbench.torch.cells as tc

    had = "mgu" in tc.TORCH_CELLS
    rnnbench.torch.register_cell("mgu", mgu_step_torch)
    yield rnnbench.torch
    if not had:
        tc.TORCH_CELLS.pop("mgu", None)


def _torch_cases():
    for kwargs, T, B, lengths, init in TORCH_CONFIGS:
        yield pytest.param("eager", kwargs, T, B, lengths, init,
                           id=f"eager-{_kw_id(kwargs)}-len{int(lengths is not None)}-h0{int(init)}")
    kwargs, T, B, lengths, init = TORCH_CONFIGS[3]  # the compiled rungs: one config (bidirectional, lengths, h0)
    for backend in ("compile", "scan"):
        yield pytest.param(backend, kwargs, T, B, lengths, init, id=f"{backend}-bidirectional-lengths-h0")


@pytest.mark.parametrize("backend,kwargs,T,B,lengths,init", list(_torch_cases()))
def test_torch_impl_runs_the_user_cell_like_the_reference(mgu_in_torch, backend, kwargs, T, B, lengths, init):
    """Through the torch adapter (what the parity matrix and benchmarks use): float64, 1e-9."""
    from reference_cases import make_case

    from rnnbench.core.tolerances import assert_close
    from rnnbench.torch.adapter import get_adapter

    spec = RNNSpec("mgu", **kwargs)
    inputs, cot = make_case(spec, T, B, seed=5, initial_state=init, lengths=lengths)
    want = reference.run_case(spec, **inputs, cotangents=cot)
    adapter = get_adapter(backend)
    assert adapter.unsupported_reason(spec) is None
    got = adapter.run_case(spec, **inputs, cotangents=cot, dtype="float64")
    assert sorted(got) == sorted(want)
    assert_close(want, got, "float64", context=f"torch.{backend} mgu", spec=spec, x=inputs["x"])


def test_torch_module_of_the_user_cell(mgu_in_torch):
    rnn = mgu_in_torch.RNN("mgu", 3, 4, num_layers=2, bidirectional=True, batch_first=True)
    assert list(rnn.state_dict()) == RNNSpec("mgu", 3, 4, num_layers=2, bidirectional=True).param_names()
    out, h_n = rnn(torch.randn(2, 5, 3))
    assert out.shape == (2, 5, 8) and h_n.shape == (4, 2, 4)
    with pytest.raises(ValueError, match="cuDNN"):
        rnn.backend = "native"


# ---- rnnbench.jax: the user's step is mgu_step_jax (tests/own_cell_example.py) -----------------

@pytest.fixture(scope="module")
def mgu_in_jax(mgu_registered):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)  # the float64 checks below
    import rnnbench.jax
    import rnnbench.jax.cells as jc

    had = "mgu" in jc.JAX_CELLS
    rnnbench.jax.register_cell("mgu", mgu_step_jax)
    yield rnnbench.jax
    if not had:
        jc.JAX_CELLS.pop("mgu", None)


# scan compiles per shape: two configurations cover every option between them
JAX_CONFIGS = [TORCH_CONFIGS[1], TORCH_CONFIGS[4]]


@pytest.mark.parametrize("config", JAX_CONFIGS,
                         ids=lambda c: f"{_kw_id(c[0])}-len{int(c[3] is not None)}-h0{int(c[4])}")
def test_jax_impl_runs_the_user_cell_like_the_reference(mgu_in_jax, config):
    """Through the jax adapter (what the parity matrix and benchmarks use): float64, 1e-9."""
    from reference_cases import make_case

    from rnnbench.jax.adapter import get_adapter
    from rnnbench.core.tolerances import assert_close

    kwargs, T, B, lengths, init = config
    spec = RNNSpec("mgu", **kwargs)
    inputs, cot = make_case(spec, T, B, seed=6, initial_state=init, lengths=lengths)
    want = reference.run_case(spec, **inputs, cotangents=cot)
    adapter = get_adapter("scan")
    assert adapter.unsupported_reason(spec, lengths=lengths is not None) is None
    got = adapter.run_case(spec, **inputs, cotangents=cot, dtype="float64")
    assert sorted(got) == sorted(want)
    assert_close(want, got, "float64", context="jax.scan mgu", spec=spec, x=inputs["x"])


def test_jax_module_of_the_user_cell(mgu_in_jax):
    import jax.numpy as jnp
    from flax import nnx

    rnn = mgu_in_jax.RNN("mgu", 3, 4, num_layers=2, bidirectional=True, batch_first=True, rngs=nnx.Rngs(0),
                       param_dtype=jnp.float64)
    spec = RNNSpec("mgu", 3, 4, num_layers=2, bidirectional=True, batch_first=True)
    assert list(rnn.state_dict()) == spec.param_names()
    x = np.random.default_rng(7).standard_normal((2, 5, 3))
    out, h_n = rnn(x)
    assert out.shape == (2, 5, 8) and h_n.shape == (4, 2, 4)
    want = reference.run_case(spec, rnn.state_dict(), x)
    np.testing.assert_allclose(out, want["output"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(h_n, want["h_n"], rtol=0, atol=1e-12)
    with pytest.raises(mgu_in_jax.UnsupportedConfigError, match="jax.flax_nnx implements only lstm, gru, not 'mgu'"):
        mgu_in_jax.RNN("mgu", 3, 4, rngs=nnx.Rngs(0), backend="flax_nnx")
