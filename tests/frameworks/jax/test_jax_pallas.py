"""jax.pallas: the fused Pallas kernels, proven on the CPU through Pallas's interpret mode.

The rung is declared for CUDA (Triton); `interpret=True` (one of its OPTIONS) runs the same
`run_direction` and the same kernels through Pallas's interpreter, so every test here but the
`gpu` ones drives `rnnbench.jax.stack.run(pallas, ...)` -- the rung's own code path -- with
that option: the shared vectors (float64 and float32, outputs, final states and every
gradient, within the project's bounds), the scan rung with several tiles of hidden units,
the custom_vjp against numerical gradients, HIGHEST precision on every dot, and the refusals.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import rnnbench.jax as rj  # noqa: E402
from rnnbench.core.params import init_params, layer_params  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402
from rnnbench.core.tolerances import assert_close  # noqa: E402
from rnnbench.jax import backends, cells, stack as driver  # noqa: E402
from rnnbench.jax.backends import pallas, scan  # noqa: E402

vectors = pytest.importorskip("rnnbench.vectors", reason="shared vectors have not landed in this checkout")

HAS_GPU = any(d.platform == "gpu" for d in jax.devices())


def run_vector(case, dtype: str, device=None, **options):
    """A shared vector through the rung (`stack.run`, jit + vjp): the keys of `Adapter.run_case`."""
    spec = case.spec
    dev = device or jax.devices("cpu")[0]
    put = lambda a: jax.device_put(jnp.asarray(np.asarray(a), dtype), dev)  # noqa: E731
    jcell = cells.get_jax_cell(spec.cell)
    params = {k: put(v) for k, v in case.params.items()}
    x = put(case.x)
    B = x.shape[0] if spec.batch_first else x.shape[1]
    shapes = spec.state_shapes(B)
    names = ("h", "c") if jcell.has_cell_state else ("h",)
    given = {"h": case.h0, "c": case.c0}
    state = tuple(put(given[n]) if given[n] is not None else put(np.zeros(shapes[n])) for n in names)
    lengths = None if case.lengths is None else jax.device_put(jnp.asarray(case.lengths, jnp.int32), dev)
    cot = {k: put(v) for k, v in case.cotangents.items() if k in ("output", "h_n", "c_n")}

    def f(params, x, state):
        xt = jnp.swapaxes(x, 0, 1) if spec.batch_first else x
        out, st = driver.run(pallas, jcell, spec, params, xt, state, lengths, **options)
        out = jnp.swapaxes(out, 0, 1) if spec.batch_first else out
        return dict(zip(("output", "h_n", "c_n"), (out, *st)))

    def both(params, x, state, cot):
        out, vjp = jax.vjp(f, params, x, state)
        return out, vjp({k: cot[k] for k in out})

    out, (gp, gx, gs) = jax.jit(both)(params, x, state, cot)
    got = {k: np.asarray(v, np.float64) for k, v in out.items()}
    got["grad/x"] = np.asarray(gx, np.float64)
    for n, g in zip(names, gs):
        got[f"grad/{n}0"] = np.asarray(g, np.float64)
    got.update({f"grad/{k}": np.asarray(v, np.float64) for k, v in gp.items()})
    return got


# the richest LSTM and GRU vectors pallas computes (layers, both directions, ragged lengths, initial
# state, batch_first, no bias) and the ragged bidirectional ones with biases (b_hn for the GRU)
VECTOR_RUNS = [("lstm_all_options", "float64"), ("gru_all_options", "float64"),
               ("lstm_all_options", "float32"), ("gru_all_options", "float32"),
               ("lstm_lengths_bidirectional", "float64"), ("gru_lengths_bidirectional", "float64")]


@pytest.mark.parametrize("name, dtype", VECTOR_RUNS)
def test_shared_vectors_in_interpret_mode(name, dtype):
    case = vectors.load_case(name)
    got = run_vector(case, dtype, interpret=True)
    expected = {**case.expected, **case.grads}
    assert {"grad/x", *(f"grad/{k}" for k in case.params)} <= set(expected)  # every gradient is compared
    assert_close(expected, {k: got[k] for k in expected}, dtype, f"jax.pallas[interpret] {name}",
                 spec=case.spec, x=case.x)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_several_tiles_match_scan_under_jit_grad(cell):
    """H = 20 pads to 32 and runs in two programs of block_h = 16 (B = 3 pads to 16); a
    bidirectional layer with ragged lengths and initial states, float32: outputs, final states and
    `jax.jit(jax.grad(...))` of a loss in every input, weight and bias against the scan rung (two
    layers: the shared vectors above)."""
    spec = RNNSpec(cell, 5, 20, bidirectional=True)
    rng = np.random.default_rng(3)
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    params = {k: f32(v) for k, v in init_params(spec, rng).items()}
    T, B = 7, 3
    x = f32(rng.standard_normal((T, B, 5)))
    shapes = spec.state_shapes(B)
    state = tuple(f32(rng.standard_normal(shapes[n])) for n in (("h", "c") if cell == "lstm" else ("h",)))
    lengths = jnp.array([7, 2, 5], jnp.int32)
    jcell = cells.get_jax_cell(cell)
    weights = [f32(rng.standard_normal(s)) for s in ((T, B, 40),) + tuple(a.shape for a in state)]

    def loss(params, x, state, backend, **options):
        out, st = driver.run(backend, jcell, spec, params, x, state, lengths, **options)
        return (out * weights[0]).sum() + sum((s * w).sum() for s, w in zip(st, weights[1:])), (out, st)

    grad = lambda backend, **o: jax.jit(jax.grad(lambda *a: loss(*a, backend, **o), argnums=(0, 1, 2),  # noqa: E731
                                                 has_aux=True))
    with jax.default_matmul_precision("highest"):
        want = grad(scan)(params, x, state)
    got = grad(pallas, interpret=True, block_h=16)(params, x, state)
    want_leaves, got_leaves = jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)
    assert len(got_leaves) == len(params) + 1 + len(state) + 1 + len(state)  # gradients; output, final states
    for w, g in zip(want_leaves, got_leaves):
        assert g.dtype == jnp.float32 and float(jnp.max(jnp.abs(w))) > 0
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-5)
    out = np.asarray(got[1][0])
    assert not out[2:, 1].any() and out[:2, 1].all()  # past its length a row outputs zeros


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_custom_vjp_has_the_gradients_of_its_forward(cell):
    """The hand-written backward against numerical derivatives of the kernels' forward (float64,
    ragged, two tiles)."""
    rng = np.random.default_rng(0)
    T, B, H = 4, 3, 17
    G = 4 if cell == "lstm" else 3
    cfg = pallas._Config(interpret=True, block_h=16)
    lens = jnp.array([4, 1, 3], jnp.int32)
    arr = lambda *s: jnp.asarray(rng.standard_normal(s) * 0.5)  # noqa: E731
    xg, w_hh, h0 = arr(T, B, G * H), arr(G * H, H), arr(B, H)
    if cell == "lstm":
        f = lambda xg, w, h0, c0: pallas.lstm_recurrence(cfg, xg, w, h0, c0, lens)  # noqa: E731
        check_grads(jax.jit(f), (xg, w_hh, h0, arr(B, H)), order=1, modes=("rev",))
    else:
        f = lambda xg, w, b, h0: pallas.gru_recurrence(cfg, xg, w, b, h0, lens)  # noqa: E731
        check_grads(jax.jit(f), (xg, w_hh, arr(G * H), h0), order=1, modes=("rev",))


def _equations(jaxpr, inside=False):
    """(eqn, inside a pallas_call kernel) for every equation, nested jaxprs included."""
    for eqn in jaxpr.eqns:
        yield eqn, inside
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    yield from _equations(sub, inside or eqn.primitive.name == "pallas_call")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_every_dot_asks_for_highest_precision(cell):
    """In the traced program of the rung's gradient (forward and backward kernels, the projection and
    the weight-gradient GEMMs) every dot_general asks for Precision.HIGHEST (a GPU's default would be
    TF32); and in the module's source every dot is written with it."""
    spec = RNNSpec(cell, 3, 4, bidirectional=True)
    params = {k: jnp.asarray(v, jnp.float32) for k, v in init_params(spec, np.random.default_rng(0)).items()}
    jcell = cells.get_jax_cell(cell)
    state = tuple(jnp.zeros((2, 2, 4), jnp.float32) for _ in range(2 if cell == "lstm" else 1))

    def loss(params):
        out, _ = driver.run(pallas, jcell, spec, params, jnp.ones((3, 2, 3), jnp.float32), state, None,
                            interpret=True)
        return out.sum()

    eqns = list(_equations(jax.make_jaxpr(jax.grad(loss))(params).jaxpr))
    kernels = [e for e, _ in eqns if e.primitive.name == "pallas_call"]
    assert len(kernels) == 4  # per direction: the forward step and the backward step
    dots = [(e, inside) for e, inside in eqns if e.primitive.name == "dot_general"]
    G = 4 if cell == "lstm" else 3
    assert sum(inside for _, inside in dots) == 2 * 2 * G  # per direction, per gate: one forward, one backward
    highest = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
    for e, inside in dots:
        assert e.params["precision"] == highest, (inside, e)
    source = inspect.getsource(pallas)
    calls = re.findall(r"(?:jnp\.dot|jnp\.einsum|jnp\.matmul|lax\.dot_general|lax\.dot)\(", source)
    assert calls and len(calls) == len(re.findall(r"precision=_HIGHEST", source))
    for name, fn in vars(pallas).items():
        if name.endswith("_kernel"):
            body = inspect.getsource(fn)
            assert " @ " not in body and "_dot(" in body, name


def test_declaration_and_no_gpu_reason():
    caps = backends.capabilities("pallas")
    assert caps is pallas.CAPABILITIES and caps.devices == ("cuda",) and caps.cells == ("lstm", "gru")
    assert caps.dtypes == ("float32",) and not caps.proj_size and caps.lengths and caps.bidirectional
    assert pallas.OPTIONS == {"interpret": False, "block_h": 64}
    assert "interpret" in backends.unsupported_reason("pallas", RNNSpec("lstm", 3, 4), dtype="float32", device="cpu")
    assert backends.unsupported_reason("pallas", RNNSpec("gru", 3, 4), lengths=True, dtype="float32",
                                       device="cuda") is None
    if HAS_GPU:
        assert backends.unavailable_reason("pallas", "cuda") is None
        return
    reason = backends.unavailable_reason("pallas")
    assert reason is not None and "CUDA GPU" in reason and "interpret" in reason
    params = init_params(RNNSpec("lstm", 2, 3), np.random.default_rng(0))
    with pytest.raises(rj.BackendUnavailableError, match="pallas.*CUDA GPU"):
        rj.lstm(params, np.zeros((2, 1, 2)), backend="pallas")
    with pytest.raises(rj.BackendUnavailableError, match="CUDA GPU"):  # interpret mode is the tests' path only
        rj.lstm(params, np.zeros((2, 1, 2)), backend="pallas", interpret=True)


def test_what_the_kernels_do_not_compute_is_refused_with_the_reason():
    lstm, gru = cells.get_jax_cell("lstm"), cells.get_jax_cell("gru")
    assert "no output projection" in backends.unsupported_reason("pallas", RNNSpec("lstm", 3, 4, proj_size=2),
                                                                  dtype="float32", device="cuda")
    assert "float32" in backends.unsupported_reason("pallas", RNNSpec("lstm", 3, 4), dtype="float64", device="cuda")
    assert "lstm, gru" in backends.unsupported_reason("pallas", RNNSpec("ln_lstm", 3, 4), device="cuda")
    spec = RNNSpec("lstm", 3, 4, proj_size=2)
    p = layer_params(spec, {k: jnp.asarray(v) for k, v in init_params(spec, np.random.default_rng(0)).items()}, 0, 0)
    x, h = jnp.zeros((2, 1, 3)), jnp.zeros((1, 2))
    with pytest.raises(ValueError, match="proj_size"):
        pallas.run_direction(lstm, p, x, (h, jnp.zeros((1, 4))), None, reverse=False, interpret=True)
    gspec = RNNSpec("gru", 3, 4)
    gp = layer_params(gspec, {k: jnp.asarray(v, jnp.bfloat16) for k, v in
                              init_params(gspec, np.random.default_rng(0)).items()}, 0, 0)
    h = jnp.zeros((1, 4), jnp.bfloat16)
    with pytest.raises(ValueError, match="float32 and float64 in interpret mode, not bfloat16"):
        pallas.run_direction(gru, gp, x.astype(jnp.bfloat16), (h,), None, reverse=False, interpret=True)
    gp64 = layer_params(gspec, {k: jnp.asarray(v) for k, v in init_params(gspec, np.random.default_rng(0)).items()},
                        0, 0)
    with pytest.raises(ValueError, match="float32 on the GPU, not float64"):
        pallas.run_direction(gru, gp64, x, (jnp.zeros((1, 4)),), None, reverse=False)
    with pytest.raises(ValueError, match="ln_lstm"):
        pallas.run_direction(cells.get_jax_cell("ln_lstm"), gp64, x, (h,), None, reverse=False, interpret=True)
    for bad in (24, 8, True, "64"):
        with pytest.raises(ValueError, match="block_h must be a power of two >= 16"):
            pallas.run_direction(gru, gp64, x, (jnp.zeros((1, 4)),), None, reverse=False, interpret=True,
                                 block_h=bad)
    with pytest.raises(ValueError, match="interpret must be a bool"):
        pallas.run_direction(gru, gp64, x, (jnp.zeros((1, 4)),), None, reverse=False, interpret=1)
    with pytest.raises(TypeError, match="unknown options.*interpret, block_h"):
        rj.gru(init_params(gspec, np.random.default_rng(0)), np.zeros((2, 1, 3)), backend="pallas", tile=16)


# ---- on a CUDA GPU: the Triton-compiled kernels (not the interpreter) -------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["lstm_all_options", "gru_all_options", "lstm_layers3_bidirectional_lengths",
                                  "gru_layers3_bidirectional_lengths"])
def test_shared_vectors_on_gpu(name):
    """The front door on CUDA, float32, HIGHEST: Triton compiles the kernels."""
    from rnnbench.jax.adapter import get_adapter

    case = vectors.load_case(name)
    got = get_adapter("pallas").run_case(case.spec, case.params, **case.inputs(), cotangents=case.cotangents,
                                         dtype="float32", device="cuda")
    assert_close({**case.expected, **case.grads}, got, "float32", f"jax.pallas {name}", spec=case.spec, x=case.x)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_pallas_matches_scan_on_gpu(cell):
    """jax.pallas vs jax.scan on CUDA in float32 HIGHEST, H = 200 (pads to 256: 4 tiles), B = 20
    (pads to 32), ragged lengths, both directions, 2 layers: outputs, states and every gradient."""
    spec = RNNSpec(cell, 48, 200, num_layers=2, bidirectional=True)
    gpu = jax.devices("gpu")[0]
    rng = np.random.default_rng(1)
    put = lambda a: jax.device_put(jnp.asarray(a, jnp.float32), gpu)  # noqa: E731
    params = {k: put(v) for k, v in init_params(spec, rng).items()}
    T, B = 25, 20
    x = put(rng.standard_normal((T, B, 48)))
    shapes = spec.state_shapes(B)
    state = tuple(put(rng.standard_normal(shapes[n])) for n in (("h", "c") if cell == "lstm" else ("h",)))
    lengths = jax.device_put(jnp.asarray(rng.integers(1, T + 1, B).clip(1, T), jnp.int32), gpu)
    jcell = cells.get_jax_cell(cell)

    def both(backend, **options):
        def loss(params, x, state):
            out, st = driver.run(backend, jcell, spec, params, x, state, lengths, **options)
            return (out ** 2).sum() + sum((s * s).sum() for s in st), (out, st)
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(params, x, state)

    with jax.default_matmul_precision("highest"):
        want = both(scan)
        got = both(pallas)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)
