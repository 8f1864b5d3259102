"""The user-facing JAX API: `rnnbench.jax.lstm`/`gru`, the NNX modules, errors that name the problem.

Checked against torch.nn.LSTM/GRU (the thing the API promises to be) and the NumPy
reference; transformations (`jit`, `vmap`, `grad`) and an optax step on the NNX module.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

import rnnbench.jax  # noqa: E402
from rnnbench import reference
from rnnbench.core import registry  # noqa: E402
from rnnbench.core.params import ParamError, init_params  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402

LSTM = RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True)


def test_backend_names():
    assert rnnbench.jax.BACKENDS == registry.keys("jax")  # the registry's ladder: naive, flax_nnx, ..., cudnn
    assert [b for b in rnnbench.jax.BACKENDS if b in ("naive", "scan", "cudnn")] == ["naive", "scan", "cudnn"]
    available = rnnbench.jax.available_backends()
    assert {"naive", "scan", "bptt", "flax_linen", "flax_nnx"} <= set(available) <= set(rnnbench.jax.BACKENDS)
    with pytest.raises(rnnbench.jax.UnknownBackendError, match="valid backends: " + ", ".join(rnnbench.jax.BACKENDS)):
        rnnbench.jax.lstm(init_params(LSTM), np.zeros((2, 1, 3)), num_layers=2, bidirectional=True, backend="fast")
    assert issubclass(rnnbench.jax.UnknownBackendError, ValueError)


def test_earlier_names_are_gone():
    """No aliases before a first release: the earlier names raise as any unknown name does."""
    for module, name in ((rnnbench.jax, "IMPLS"), (rnnbench.jax, "available_impls"), (rnnbench.jax, "UnknownImplError"),
                         (rnnbench.jax, "ImplUnavailableError"), (rnnbench.jax.backends, "GENERIC_CELLS"),
                         (rnnbench.jax.cells, "has_jax_cell")):
        with pytest.raises(AttributeError):
            getattr(module, name)
    params, x = init_params(LSTM), np.random.default_rng(0).standard_normal((2, 1, 3))
    with pytest.raises(TypeError, match="impl"):  # the earlier keyword is an unknown option of the rung
        rnnbench.jax.lstm(params, x, num_layers=2, bidirectional=True, impl="naive")
    with pytest.raises(TypeError, match="impl"):
        rnnbench.jax.GRU(3, 4, rngs=nnx.Rngs(0), impl="naive")
    assert not hasattr(rnnbench.jax.GRU(3, 4, rngs=nnx.Rngs(0), backend="naive"), "impl")


def test_matches_torch_with_packed_sequence_semantics():
    """Unsorted lengths, batch_first, initial state: torch's packed LSTM and GRU."""
    torch.manual_seed(0)
    lengths = torch.tensor([2, 5, 3])
    for Module, fn in ((torch.nn.LSTM, rnnbench.jax.lstm), (torch.nn.GRU, rnnbench.jax.gru)):
        m = Module(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
        x = torch.randn(3, 5, 3, dtype=torch.float64)
        h0 = torch.randn(4, 3, 4, dtype=torch.float64)
        hx = (h0, torch.randn(4, 3, 4, dtype=torch.float64)) if Module is torch.nn.LSTM else h0
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, state = m(packed, hx)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=5)
        params = {k: v.numpy() for k, v in m.state_dict().items()}
        jhx = jax.tree.map(lambda t: t.numpy(), hx)
        got_out, got_state = fn(params, x.numpy(), jhx, lengths=lengths.numpy(), num_layers=2, bidirectional=True,
                                batch_first=True)
        np.testing.assert_allclose(got_out, out.detach().numpy(), atol=1e-12)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b.detach().numpy(), atol=1e-12), got_state, state)


def test_unbatched_input_like_torch():
    torch.manual_seed(1)
    m = torch.nn.LSTM(3, 4, proj_size=2).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    h0, c0 = torch.randn(1, 2, dtype=torch.float64), torch.randn(1, 4, dtype=torch.float64)
    out, (h, c) = m(x, (h0, c0))
    params = {k: v.numpy() for k, v in m.state_dict().items()}
    for impl in ("naive", "scan"):
        got, (gh, gc) = rnnbench.jax.lstm(params, x.numpy(), (h0.numpy(), c0.numpy()), proj_size=2, backend=impl)
        assert got.shape == (5, 2) and gh.shape == (1, 2) and gc.shape == (1, 4)
        np.testing.assert_allclose(got, out.detach().numpy(), atol=1e-12)
        np.testing.assert_allclose(gc, c.detach().numpy(), atol=1e-12)


def test_jit_grad_and_vmap_over_parameter_sets():
    spec = RNNSpec("gru", 2, 3)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((4, 2, 2)))
    sets = [init_params(spec, s) for s in range(3)]
    stacked = {k: jnp.stack([p[k] for p in sets]) for k in sets[0]}

    @jax.jit
    def loss(params, x):
        out, h = rnnbench.jax.gru(params, x, lengths=jnp.array([4, 2]))
        return jnp.sum(out ** 2) + jnp.sum(h)

    losses = jax.vmap(loss, in_axes=(0, None))(stacked, x)
    grads = jax.vmap(jax.grad(loss), in_axes=(0, None))(stacked, x)
    for i, p in enumerate(sets):
        ref = reference.run_case(spec, p, np.asarray(x), lengths=np.array([4, 2]))
        out, h = ref["output"], ref["h_n"]
        np.testing.assert_allclose(losses[i], np.sum(out ** 2) + np.sum(h), atol=1e-12)
        cot = {"output": 2 * out, "h_n": np.ones_like(h)}
        want = reference.run_case(spec, p, np.asarray(x), lengths=np.array([4, 2]), cotangents=cot)
        for name in p:
            np.testing.assert_allclose(grads[name][i], want[f"grad/{name}"], atol=1e-12)


def test_float32_inputs_compute_in_float32():
    params = init_params(LSTM)  # float64 NumPy, cast to x's dtype
    out, (h, c) = rnnbench.jax.lstm(params, np.zeros((2, 1, 3), np.float32), num_layers=2, bidirectional=True)
    assert out.dtype == h.dtype == c.dtype == jnp.float32


def test_dropout_between_layers_only_with_a_key():
    spec = RNNSpec("lstm", 3, 4, num_layers=2)
    params = init_params(spec)
    x = np.random.default_rng(0).standard_normal((3, 2, 3))
    plain = rnnbench.jax.lstm(params, x, num_layers=2)[0]
    same = rnnbench.jax.lstm(params, x, num_layers=2, dropout=0.5)[0]  # no key: eval mode
    dropped = rnnbench.jax.lstm(params, x, num_layers=2, dropout=0.5, dropout_key=jax.random.key(0))[0]
    np.testing.assert_array_equal(plain, same)
    assert not np.allclose(plain, dropped)
    assert rnnbench.jax.lstm(params, x, num_layers=2, dropout=1.0, dropout_key=jax.random.key(0))[0].shape == plain.shape


# ---- errors that name the problem ------------------------------------------------------


@pytest.mark.parametrize("call,error,match", [
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 1, 5)), num_layers=2, bidirectional=True), ValueError,
     r"feature size 5, expected input_size=3"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 4)), num_layers=2, bidirectional=True), ValueError,
     r"feature size 4"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((1, 2, 1, 3)), num_layers=2, bidirectional=True), ValueError,
     r"3-D.*got shape \(1, 2, 1, 3\)"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 1, 3), np.int32), num_layers=2, bidirectional=True), TypeError,
     r"x must be a floating-point array"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 1, 3)), (np.zeros((4, 1, 4)), np.zeros((4, 2, 4))), num_layers=2,
                             bidirectional=True), ValueError, r"c0 has shape \(4, 2, 4\), expected \(4, 1, 4\)"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 1, 3)), np.zeros((4, 1, 4)), num_layers=2, bidirectional=True),
     TypeError, r"pair \(h0, c0\)"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 1, 3)), (np.zeros((1, 4)), np.zeros((1, 4))), num_layers=2,
                             bidirectional=True), ValueError, r"h0 has shape \(1, 4\), expected \(4, 1, 4\)"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((3, 2, 3)), lengths=np.array([3, 4]), num_layers=2, bidirectional=True),
     ValueError, r"lengths must be in \[1, T=3\], got \[4\]"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((3, 2, 3)), lengths=np.array([0, 3]), num_layers=2, bidirectional=True),
     ValueError, r"got \[0\]"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((3, 2, 3)), lengths=np.array([3]), num_layers=2, bidirectional=True),
     ValueError, r"lengths has shape \(1,\), expected \(2,\)"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((3, 2, 3)), lengths=np.array([3.0, 2.0]), num_layers=2,
                             bidirectional=True), TypeError, r"lengths must be an integer array"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((3, 3)), lengths=np.array([3]), num_layers=2, bidirectional=True),
     ValueError, r"lengths needs batched"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 1, 3)), num_layers=1, bidirectional=True), ParamError,
     r"unexpected: weight_ih_l1"),
    (lambda p: rnnbench.jax.lstm({k: v for k, v in p.items() if k != "bias_hh_l1_reverse"}, np.zeros((2, 1, 3)),
                             num_layers=2, bidirectional=True), ParamError, r"missing: bias_hh_l1_reverse"),
    (lambda p: rnnbench.jax.lstm({**p, "weight_hh_l1": np.zeros((16, 5))}, np.zeros((2, 1, 3)), num_layers=2,
                             bidirectional=True), ParamError, r"weight_hh_l1 has shape \(16, 5\), expected \(16, 4\)"),
    (lambda p: rnnbench.jax.gru(p, np.zeros((2, 1, 3)), num_layers=2, bidirectional=True), ParamError,
     r"not GRU weights"),
    (lambda p: rnnbench.jax.lstm(p, np.zeros((2, 1, 3)), num_layers=2, bidirectional=True, dropout=1.5), ValueError,
     r"dropout must be a number in \[0, 1\]"),
])
def test_bad_input_raises_naming_the_problem(call, error, match):
    with pytest.raises(error, match=match):
        call(init_params(LSTM))


# ---- the NNX modules ----------------------------------------------------------------


def test_nnx_module_params_and_torch_state_dict():
    torch.manual_seed(2)
    m = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, batch_first=True).double()
    model = rnnbench.jax.LSTM.from_torch(m, param_dtype=jnp.float64)
    assert isinstance(model.weight_hr_l1_reverse, nnx.Param)
    assert list(model.state_dict()) == list(m.state_dict())
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    out, (h, c) = m(x)
    got, (gh, gc) = model(x.numpy())
    np.testing.assert_allclose(got, out.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(gh, h.detach().numpy(), atol=1e-12)

    gru = rnnbench.jax.GRU(3, 4, num_layers=2, rngs=nnx.Rngs(0), backend="naive")
    with pytest.raises(ParamError, match="missing: weight_ih_l1"):
        gru.load_state_dict({k: v for k, v in torch.nn.GRU(3, 4).state_dict().items()})
    tg = torch.nn.GRU(3, 4, num_layers=2).double()
    gru.load_state_dict(tg.state_dict())
    np.testing.assert_allclose(gru.state_dict()["bias_hh_l1"], tg.bias_hh_l1.detach().numpy().astype(np.float32))


def test_nnx_module_trains_with_optax():
    model = rnnbench.jax.LSTM(3, 4, num_layers=2, dropout=0.5, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((5, 2, 3)), jnp.float32)
    before = {k: np.asarray(v) for k, v in model.state_dict().items()}

    @nnx.jit
    def step(model, optimizer, x):
        def loss_fn(model):
            out, _ = model(x)
            return jnp.mean((out - 0.5) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss, grads

    loss, grads = step(model, optimizer, x)
    assert set(nnx.to_pure_dict(grads)) == set(before)
    for name, value in model.state_dict().items():  # one SGD step: p' = p - 0.1 * g
        np.testing.assert_allclose(value, before[name] - 0.1 * np.asarray(getattr(grads, name)[...]), atol=1e-6)
    model.eval()
    a, b = model(x)[0], model(x)[0]
    np.testing.assert_array_equal(a, b)  # no dropout in eval mode


def test_nnx_module_constructor_errors():
    with pytest.raises(rnnbench.jax.UnknownBackendError, match="valid backends"):
        rnnbench.jax.LSTM(3, 4, rngs=nnx.Rngs(0), backend="nope")
    with pytest.raises(rnnbench.jax.UnsupportedConfigError, match="proj_size"):
        rnnbench.jax.LSTM(3, 4, proj_size=2, rngs=nnx.Rngs(0), backend="flax_linen")
    with pytest.raises(ValueError, match="proj_size must be in"):
        rnnbench.jax.LSTM(3, 4, proj_size=4, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="unknown options"):
        rnnbench.jax.GRU(3, 4, rngs=nnx.Rngs(0), backend="naive", unroll=2)


# ---------------------------------------------------------------------------------
# rnnbench.jax.jit / xla_options: rnnbench's XLA compiler options


def test_xla_options_modes(monkeypatch):
    from rnnbench.jax import xla_options

    monkeypatch.delenv("RNNBENCH_XLA", raising=False)
    assert xla_options.compiler_options("cpu") == {}  # XLA's defaults unless asked
    monkeypatch.setenv("RNNBENCH_XLA", "fused")
    assert xla_options.compiler_options("cpu") == xla_options.CPU_OPTIONS
    assert xla_options.compiler_options("gpu") == {}
    monkeypatch.setenv("RNNBENCH_XLA", "default")
    assert xla_options.compiler_options("cpu") == {}
    monkeypatch.setenv("RNNBENCH_XLA", "fast")
    with pytest.raises(ValueError, match="RNNBENCH_XLA"):
        xla_options.compiler_options("cpu")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_jit_with_xla_options_computes_the_same(monkeypatch, cell):
    """The fused compilation (RNNBENCH_XLA=fused: YNNPACK dot fusion on the CPU) agrees with XLA's default one."""
    import jax
    import jax.numpy as jnp

    import rnnbench.jax
    from rnnbench.core.params import init_params
    from rnnbench.core.spec import RNNSpec

    monkeypatch.setenv("RNNBENCH_XLA", "fused")
    rng = np.random.default_rng(3)
    spec = RNNSpec(cell, 24, 32)
    params = {k: jnp.asarray(v, jnp.float32) for k, v in init_params(spec, rng).items()}
    x = jnp.asarray(rng.standard_normal((12, 5, 24)), jnp.float32)

    def loss(p, x):
        return jnp.sum(jnp.sin(rnnbench.jax.rnn(p, x, cell=cell)[0]))

    f = jax.value_and_grad(loss, argnums=(0, 1))
    fused = rnnbench.jax.jit(f)(params, x)
    plain = jax.jit(f)(params, x)
    for a, b in zip(jax.tree_util.tree_leaves(fused), jax.tree_util.tree_leaves(plain)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=2e-5)


# ---------------------------------------------------------------------------------
# rnnbench.jax.profiling: XLA per-op times from a jax.profiler trace


def test_parse_hlo_finds_gemms_inside_fusions():
    from rnnbench.jax.profiling import parse_hlo

    hlo = """HloModule m
%fused_dot (p0: f32[4,8], p1: f32[8,2]) -> f32[4,2] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %p1 = f32[8,2]{1,0} parameter(1)
  ROOT %d = f32[4,2]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%fused_tanh (p0.1: f32[4,2]) -> f32[4,2] {
  %p0.1 = f32[4,2]{1,0} parameter(0)
  ROOT %t = f32[4,2]{1,0} tanh(%p0.1)
}
ENTRY %main (a: f32[4,8], b: f32[8,2]) -> f32[4,2] {
  %a = f32[4,8]{1,0} parameter(0)
  %b = f32[8,2]{1,0} parameter(1)
  %ynn_fusion = f32[4,2]{1,0} fusion(%a, %b), kind=kCustom, calls=%fused_dot
  ROOT %tanh_fusion = f32[4,2]{1,0} fusion(%ynn_fusion), kind=kLoop, calls=%fused_tanh
}
"""
    ops = parse_hlo(hlo)
    assert ops["ynn_fusion"] == ("fusion", "f32[4,2]", True)
    assert ops["tanh_fusion"] == ("fusion", "f32[4,2]", False)
    assert ops["d"] == ("dot", "f32[4,2]", True)
    assert ops["a"] == ("parameter", "f32[4,8]", False)


def test_op_times_counts_the_ops_of_a_scan_body_per_step():
    """A 7-step scan whose body is a matmul: the trace holds a GEMM op that ran 7 times per call."""
    import jax
    import jax.numpy as jnp

    from rnnbench.jax.profiling import op_times, summarize

    w = jnp.ones((48, 48), jnp.float32) / 48

    def f(h, xs):
        return jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None), h, xs)[0]

    profile = op_times(jax.jit(f), jnp.ones((4, 48), jnp.float32), jnp.ones((7, 4, 48), jnp.float32), calls=2)
    gemms = [r for r in profile.rows if r.gemm]
    assert gemms and any(r.count_per_call == 7 for r in gemms), profile.rows
    assert all(r.ms_per_call >= 0 for r in profile.rows) and profile.wall_ms_per_call > 0
    assert "GEMMs" in summarize(profile)
    with pytest.raises(ValueError, match="calls"):
        op_times(jax.jit(f), jnp.ones((4, 48)), jnp.ones((7, 4, 48)), calls=0)
