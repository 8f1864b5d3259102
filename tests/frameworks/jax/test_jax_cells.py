"""The catalogue cells (ln_lstm, peephole_lstm, gru_reset_before) in JAX: the `scan` impl
through the adapter vs the float64 NumPy reference (forward and every gradient), the
functional `rnnbench.jax.rnn` under jit / grad / vmap, the NNX modules loaded from
rnnbench.torch's modules, and errors that name the problem.

Tiny sizes; XLA compile time dominates, so the configurations share shapes.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import rnnbench.jax  # noqa: E402
from rnnbench.jax.adapter import get_adapter  # noqa: E402
from rnnbench import reference  # noqa: E402
from rnnbench.core.catalogue import CUSTOM_CELLS  # noqa: E402
from rnnbench.core.params import ParamError, init_params  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402
from rnnbench.core.tolerances import assert_close  # noqa: E402
from reference_cases import make_case  # noqa: E402

# One configuration with every option at once (2 layers, bidirectional, batch_first,
# unsorted lengths, initial states), and one plain with bias=False.
FULL = dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True, batch_first=True)
FULL_T, FULL_B, FULL_LENGTHS = 5, 3, [2, 5, 3]
PLAIN = dict(input_size=3, hidden_size=4, bias=False)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cell", CUSTOM_CELLS)
def test_scan_matches_the_reference_with_every_option(cell, dtype):
    spec = RNNSpec(cell, **FULL)
    inputs, cot = make_case(spec, FULL_T, FULL_B, seed=11, initial_state=True, lengths=FULL_LENGTHS)
    want = reference.run_case(spec, **inputs, cotangents=cot)
    adapter = get_adapter("scan")
    assert adapter.unsupported_reason(spec, lengths=True, dtype=dtype) is None
    got = adapter.run_case(spec, **inputs, cotangents=cot, dtype=dtype)
    assert sorted(got) == sorted(want)  # every parameter's gradient, the extras' included
    assert_close(want, got, dtype, context=f"jax.scan {cell} {dtype}", spec=spec, x=inputs["x"])


@pytest.mark.parametrize("cell", CUSTOM_CELLS)
def test_scan_without_bias_or_initial_state(cell):
    spec = RNNSpec(cell, **PLAIN)
    inputs, cot = make_case(spec, 4, 2, seed=12, initial_state=False)
    want = reference.run_case(spec, **inputs, cotangents=cot)
    got = get_adapter("scan", remat=True).run_case(spec, **inputs, cotangents=cot, dtype="float64")
    assert sorted(got) == sorted(want)
    assert_close(want, got, "float64", context=f"jax.scan remat {cell} bias=False", spec=spec, x=inputs["x"])


def _params(spec, seed=0):
    rng = np.random.default_rng(seed)
    inputs, _ = make_case(spec, 1, 1, seed=seed)
    return {k: jnp.asarray(v) for k, v in inputs["params"].items()}, rng


def test_functional_rnn_under_jit_grad_and_vmap():
    """`rnnbench.jax.rnn` is a pure function: jit agrees with eager, vmap over unbatched
    sequences agrees with the batched call, and grad agrees with the reference's."""
    spec = RNNSpec("ln_lstm", 3, 4)
    params, rng = _params(spec, 3)
    x = jnp.asarray(rng.standard_normal((4, 2, 3)))
    out, (h_n, c_n) = rnnbench.jax.rnn(params, x, cell="ln_lstm")
    assert out.shape == (4, 2, 4) and h_n.shape == c_n.shape == (1, 2, 4)
    jit_out, _ = jax.jit(lambda p, x: rnnbench.jax.rnn(p, x, cell="ln_lstm"))(params, x)
    np.testing.assert_allclose(jit_out, out, rtol=0, atol=1e-12)
    vmapped = jax.vmap(lambda xb: rnnbench.jax.rnn(params, xb, cell="ln_lstm")[0], in_axes=1, out_axes=1)(x)
    np.testing.assert_allclose(vmapped, out, rtol=0, atol=1e-12)

    g = rng.standard_normal(out.shape)
    grads = jax.grad(lambda p: jnp.vdot(rnnbench.jax.rnn(p, x, cell="ln_lstm")[0], g))(params)
    zeros = {"h_n": np.zeros((1, 2, 4)), "c_n": np.zeros((1, 2, 4))}
    want = reference.run_case(spec, {k: np.asarray(v) for k, v in params.items()}, np.asarray(x),
                              cotangents={"output": g, **zeros})
    for name in spec.param_names():
        np.testing.assert_allclose(grads[name], want[f"grad/{name}"], rtol=0, atol=1e-9, err_msg=name)

    # gru family: hx is one array, the result (output, h_n)
    gspec = RNNSpec("gru_reset_before", 3, 4)
    gparams, _ = _params(gspec, 4)
    out, h_n = rnnbench.jax.rnn(gparams, x, jnp.zeros((1, 2, 4)), cell="gru_reset_before")
    assert out.shape == (4, 2, 4) and h_n.shape == (1, 2, 4)


torch = pytest.importorskip("torch")

MODULES = [("LayerNormLSTM", "ln_lstm"), ("PeepholeLSTM", "peephole_lstm"), ("ResetBeforeGRU", "gru_reset_before")]


@pytest.mark.parametrize("name,cell", MODULES)
def test_nnx_module_loads_torch_impl_state_dict_and_agrees(name, cell):
    import rnnbench.torch

    torch.manual_seed(0)
    tmod = getattr(rnnbench.torch, name)(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    with torch.no_grad():  # move LN gains/biases off ones/zeros so they matter
        for p in tmod.parameters():
            p.add_(0.2 * torch.randn_like(p))
    jmod = getattr(rnnbench.jax, name).from_torch(tmod, param_dtype=jnp.float64)
    assert list(jmod.state_dict()) == list(tmod.state_dict())
    assert list(jmod.state_dict()) == RNNSpec(cell, **FULL).param_names()

    x = torch.randn(3, 5, 3, dtype=torch.float64)
    lengths = torch.tensor(FULL_LENGTHS)
    want = tmod(x, lengths=lengths)
    got = jmod(x.numpy(), lengths=lengths.numpy())
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), b.detach().numpy(), rtol=0, atol=1e-12),
                 got, want)

    # load_state_dict into a fresh module gives the same parameters
    fresh = rnnbench.jax.RNN(cell, 3, 4, num_layers=2, bidirectional=True, batch_first=True,
                         rngs=nnx.Rngs(1), param_dtype=jnp.float64)
    fresh.load_state_dict(tmod.state_dict())
    for k, v in tmod.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[k], v.numpy())


def test_nnx_module_initialises_extras_like_the_catalogue():
    m = rnnbench.jax.LayerNormLSTM(3, 4, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(m.layernorm_c_weight_l0[...], np.ones(4))
    np.testing.assert_array_equal(m.layernorm_ih_bias_l0[...], np.zeros(16))
    p = rnnbench.jax.PeepholeLSTM(3, 4, rngs=nnx.Rngs(0)).peephole_l0[...]
    assert p.shape == (12,) and 0 < np.abs(p).max() <= 0.5  # U(-1/sqrt(H), 1/sqrt(H))


def test_missing_extra_parameter_is_named():
    spec = RNNSpec("ln_lstm", 3, 4)
    params = init_params(spec)
    del params["layernorm_c_weight_l0"]
    with pytest.raises(ParamError, match="missing: layernorm_c_weight_l0"):
        rnnbench.jax.rnn(params, np.zeros((2, 1, 3)), cell="ln_lstm")
    m = rnnbench.jax.LayerNormLSTM(3, 4, rngs=nnx.Rngs(0))
    with pytest.raises(ParamError, match="missing: layernorm_c_weight_l0"):
        m.load_state_dict(params)


def test_impls_without_the_cell_table_refuse_with_the_reason():
    spec = RNNSpec("peephole_lstm", 3, 4)
    params = init_params(spec)
    with pytest.raises(rnnbench.jax.UnsupportedConfigError,
                       match="jax.flax_linen implements only lstm, gru, not 'peephole_lstm'.*peepholes.*runs on scan, bptt"):
        rnnbench.jax.rnn(params, np.zeros((2, 1, 3)), cell="peephole_lstm", backend="flax_linen")
    for key in ("naive", "flax_nnx", "flax_linen"):
        assert "implements only lstm, gru, not 'peephole_lstm'" in get_adapter(key).unsupported_reason(spec)
    with pytest.raises(rnnbench.jax.UnsupportedConfigError, match="jax.naive implements only lstm, gru"):
        rnnbench.jax.PeepholeLSTM(3, 4, rngs=nnx.Rngs(0), backend="naive")


def test_registration_errors_are_clear():
    from rnnbench.core.catalogue import CELL_DEFS, CellDef, register_cell

    with pytest.raises(ValueError, match="cell must be one of"):
        rnnbench.jax.register_cell("not_in_catalogue", lambda x, s, p: s)
    with pytest.raises(ValueError, match="a different JAX step is already registered for cell 'lstm' "
                                         r"\(a built-in cell: register a new cell name\)"):
        rnnbench.jax.register_cell("lstm", lambda x, s, p: s)
    with pytest.raises(ValueError, match="a different JAX step is already registered for cell 'ln_lstm'"):
        rnnbench.jax.register_cell("ln_lstm", lambda x, s, p: s)
    lonely = CellDef("jax_cell_without_step", "gru", ("r", "z", "n"), "no JAX step", "h' = h")
    register_cell(lonely)
    try:
        spec = RNNSpec(lonely.name, 2, 2)
        with pytest.raises(ValueError, match=r"has no JAX step; add one with "
                                             r"rnnbench.jax.register_cell\('jax_cell_without_step', step\)"):
            rnnbench.jax.rnn(init_params(spec), np.zeros((1, 1, 2)), cell=lonely.name)
        assert "has no JAX step" in get_adapter("scan").unsupported_reason(spec)
    finally:
        CELL_DEFS.pop(lonely.name, None)


def test_default_projection_of_a_registered_cell_is_x_w_ih_plus_b_ih():
    """A cell registered without `project` hoists `x W_ih^T + b_ih` (`cells.default_project`)."""
    from rnnbench.jax import cells

    rng = np.random.default_rng(5)
    x, w, b = (jnp.asarray(rng.standard_normal(s)) for s in [(6, 3), (8, 3), (8,)])
    np.testing.assert_allclose(cells.default_project(x, {"weight_ih": w, "bias_ih": b}), x @ w.T + b, rtol=1e-15)
    np.testing.assert_allclose(cells.default_project(x, {"weight_ih": w, "bias_ih": None}), x @ w.T, rtol=1e-15)
    step = lambda x_t, state, q: state  # noqa: E731
    assert cells.CELLS.build(cells.CELLS.get("gru").defn, step).project is cells.default_project


def test_the_earlier_name_has_jax_cell_is_gone():
    from rnnbench.jax import cells

    assert not hasattr(cells, "has_jax_cell") and callable(cells.has_cell)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_float32_runs_stay_float32_with_x64_enabled(cell):
    """Outputs, states and gradients of a float32 `scan` run are float32 although float64 is
    enabled here: a constant made with the default dtype (float64 under x64) would promote them."""
    spec = RNNSpec(cell, 3, 4)
    params = {k: jnp.asarray(v, jnp.float32) for k, v in init_params(spec, np.random.default_rng(6)).items()}
    x = jnp.asarray(np.random.default_rng(7).standard_normal((4, 2, 3)), jnp.float32)

    def loss(params, x):
        out, _ = rnnbench.jax.rnn(params, x, cell=cell, backend="scan")
        return jnp.sum(out)

    out, state = rnnbench.jax.rnn(params, x, cell=cell, backend="scan")
    grads = jax.grad(loss, argnums=(0, 1))(params, x)
    leaves = jax.tree_util.tree_leaves((out, state, grads))
    assert len(leaves) == 1 + (2 if cell == "lstm" else 1) + len(params) + 1
    assert {leaf.dtype for leaf in leaves} == {jnp.dtype(jnp.float32)}


def test_time_loop_runs_forward_in_time_by_default():
    """`cells.time_loop(step, x_proj, state, q)` with its defaults is the loop t = 0 .. T-1 (and
    `reverse=True` the loop t = T-1 .. 0), outputs in time order."""
    from rnnbench.jax import cells

    def step(x_t, state, q):  # order-sensitive: h' = q h + x_t
        return (q * state[0] + x_t,)

    x_proj = jnp.arange(1.0, 5.0)[:, None, None] * jnp.ones((4, 2, 3))
    h0 = (jnp.zeros((2, 3)),)
    for reverse, order in ((None, range(4)), (True, reversed(range(4)))):
        h, want = h0[0], [None] * 4
        for t in order:
            h = 0.5 * h + x_proj[t]
            want[t] = h
        kwargs = {} if reverse is None else {"reverse": reverse}
        out, (h_n,) = cells.time_loop(step, x_proj, h0, 0.5, **kwargs)
        np.testing.assert_allclose(out, jnp.stack(want), rtol=1e-15)
        np.testing.assert_allclose(h_n, h, rtol=1e-15)
