"""jax.fused: the C++ kernel as XLA FFI custom calls in custom_vjp (the parity matrix runs it on the
shared vectors; here what is particular to it)."""

from __future__ import annotations

import numpy as np
import pytest

from rnnbench import kernels

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import rnnbench.jax as rj  # noqa: E402
from rnnbench.core.params import init_params  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402
from rnnbench.jax.backends import fused  # noqa: E402

pytestmark = pytest.mark.skipif(fused.unavailable_reason(None) is not None,
                                reason=f"the fused kernels cannot be built here: {kernels.unavailable_reason()}")


@pytest.mark.parametrize("lengths", [None, [5, 2, 4]])
def test_the_custom_calls_have_the_gradients_of_their_forward(lengths):
    rng = np.random.default_rng(0)
    T, B, H = 5, 3, 4
    lens = jnp.array(lengths if lengths else [T] * B)
    h0, c0 = (jnp.asarray(rng.standard_normal((B, H))) for _ in range(2))
    xg, w_hh = jnp.asarray(rng.standard_normal((T, B, 4 * H))), jnp.asarray(rng.standard_normal((4 * H, H)))
    check_grads(lambda *a: fused.lstm_recurrence(*a, lens), (xg, w_hh, h0, c0), order=1, modes=("rev",))
    xg, w_hh = jnp.asarray(rng.standard_normal((T, B, 3 * H))), jnp.asarray(rng.standard_normal((3 * H, H)))
    check_grads(lambda *a: fused.gru_recurrence(*a, lens), (xg, w_hh, jnp.asarray(rng.standard_normal(3 * H)), h0),
                order=1, modes=("rev",))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jit_grad_matches_scan_with_int32_lengths(dtype):
    """Under jit, in float32 too; lengths as JAX makes them without x64 (int32) reach the kernel right."""
    spec = RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True)
    params = {k: jnp.asarray(v, dtype) for k, v in init_params(spec, np.random.default_rng(0)).items()}
    x = jnp.asarray(np.random.default_rng(1).standard_normal((6, 2, 3)), dtype)
    lengths = jnp.array([6, 3], jnp.int32)

    def loss(params, backend):
        out, (h, c) = rj.lstm(params, x, lengths=lengths, num_layers=2, bidirectional=True, backend=backend)
        return (out ** 2).sum() + h.sum() + c.sum()

    want = jax.jit(jax.grad(loss), static_argnums=1)(params, "scan")
    got = jax.jit(jax.grad(loss), static_argnums=1)(params, "fused")
    tol = 1e-12 if dtype == "float64" else 1e-5
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=tol, atol=tol, err_msg=k)


def test_what_the_kernel_does_not_compute_is_refused_with_the_reason():
    params = init_params(RNNSpec("lstm", 3, 4, proj_size=2), np.random.default_rng(0))
    with pytest.raises(rj.UnsupportedConfigError, match="no output projection"):
        rj.lstm(params, np.zeros((2, 1, 3)), proj_size=2, backend="fused")
    params = {k: jnp.asarray(v, jnp.bfloat16) for k, v in init_params(RNNSpec("gru", 3, 4), np.random.default_rng(0)).items()}
    with pytest.raises(rj.UnsupportedConfigError, match="float32 and float64"):
        rj.gru(params, jnp.zeros((2, 1, 3), jnp.bfloat16), backend="fused")


# ---- the binding code around the custom calls (what mutation testing of fused.py asks of this file) ----

def _both(cell, spec_kw, x, lengths, backend):
    spec = RNNSpec(cell, 3, 4, **spec_kw)
    params = {k: jnp.asarray(v) for k, v in init_params(spec, np.random.default_rng(0)).items()}
    fn = getattr(rj, cell)
    kw = dict(num_layers=spec.num_layers, bidirectional=spec.bidirectional)

    def loss(params):
        out, state = fn(params, x, lengths=lengths, backend=backend, **kw)
        return (out ** 2).sum() + sum(s.sum() for s in (state if isinstance(state, tuple) else (state,))), out

    (_, out), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return out, grads


@pytest.mark.parametrize("lengths", [None, [6, 2]])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_rung_is_scan_with_and_without_biases_and_lengths(cell, bias, lengths):
    """Outputs (the padded positions too: zero past a length, in both directions) and every
    gradient, with and without biases and lengths, one and two directions."""
    x = jnp.asarray(np.random.default_rng(1).standard_normal((6, 2, 3)))
    lengths = None if lengths is None else jnp.array(lengths)
    for kw in ({}, dict(num_layers=2, bidirectional=True)):
        out_want, want = _both(cell, dict(bias=bias, **kw), x, lengths, "scan")
        out_got, got = _both(cell, dict(bias=bias, **kw), x, lengths, "fused")
        np.testing.assert_allclose(np.asarray(out_got), np.asarray(out_want), rtol=1e-12, atol=1e-12)
        for k in want:
            np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-10, atol=1e-12, err_msg=k)


def test_vmap_runs_one_custom_call_per_element():
    spec = RNNSpec("lstm", 3, 4)
    params = {k: jnp.asarray(v) for k, v in init_params(spec, np.random.default_rng(0)).items()}
    xs = jnp.asarray(np.random.default_rng(1).standard_normal((2, 5, 1, 3)))
    run = lambda backend: jax.vmap(lambda x: rj.lstm(params, x, backend=backend)[0])(xs)  # noqa: E731
    np.testing.assert_allclose(np.asarray(run("fused")), np.asarray(run("scan")), rtol=1e-12, atol=1e-12)


def test_run_direction_names_what_it_does_not_run():
    from rnnbench.core.params import LayerParams
    from rnnbench.jax.cells import CELLS

    p = LayerParams(*(jnp.zeros(s) for s in ((16, 3), (16, 4), (16,), (16,))), None)
    x, state = jnp.zeros((2, 1, 3)), (jnp.zeros((1, 4)), jnp.zeros((1, 4)))
    with pytest.raises(ValueError, match=r"^jax.fused runs lstm, gru only, not 'peephole_lstm'$"):
        fused.run_direction(CELLS.get("peephole_lstm"), p, x, state, None, reverse=False)
    with pytest.raises(ValueError, match=r"^jax.fused does not support proj_size$"):
        fused.run_direction(CELLS.get("lstm"), p._replace(w_hr=jnp.zeros((2, 4))), x, state, None, reverse=False)


def test_unavailable_reason_names_the_missing_piece(monkeypatch):
    assert fused.unavailable_reason(None) is None
    monkeypatch.setattr(kernels, "has_xla_handlers", lambda: False)
    assert fused.unavailable_reason(None) == ("the fused kernels were built without jaxlib's XLA FFI headers "
                                              "(jax.ffi.include_dir())")
    monkeypatch.setattr(kernels, "unavailable_reason", lambda: "no compiler")
    assert fused.unavailable_reason(None) == "no compiler"
