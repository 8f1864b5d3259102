"""Every rnnbench.jax impl against the float64 NumPy reference, plus what is special to each.

The project-wide parity matrix runs the shared vectors through `rnnbench.jax.adapter`; here
each impl meets a small seeded grid of configurations of its own (forward and every
gradient through the adapter's `jax.vjp`), float64 to 1e-9 and float32 to 2e-5, and the
impl-specific parts: scan's `unroll`/`remat`, `check_grads`, the Flax layouts pinned to
the shared converters, the NNX GRU's b_hn refusal and the cuDNN weight layout.
Compiles dominate the run time, so the configurations are tiny and few.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)  # float64 cases; float32 ones pass explicit dtypes

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import rnnbench.jax  # noqa: E402
from rnnbench.jax import stack as driver  # noqa: E402
from rnnbench.jax.backends import cudnn, flax_linen, flax_nnx  # noqa: E402
from rnnbench.jax.cells import get_jax_cell  # noqa: E402
from rnnbench.jax.adapter import JaxAdapter, get_adapter  # noqa: E402
from rnnbench import reference  # noqa: E402
from rnnbench.converters import ConversionError, to_flax_linen, to_flax_nnx  # noqa: E402
from rnnbench.core.params import init_params  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402
from rnnbench.core.tolerances import assert_close  # noqa: E402

CPU_IMPLS = [name for name in rnnbench.jax.BACKENDS if name not in ("cudnn", "pallas")]  # pallas: test_jax_pallas.py


def make_case(spec: RNNSpec, *, T=4, B=3, seed=0, lengths=False, state=False):
    """Seeded inputs, params and cotangents for `spec`, with the reference's answer."""
    rng = np.random.default_rng(seed)
    params = init_params(spec, rng)
    x = rng.standard_normal((B, T, spec.input_size) if spec.batch_first else (T, B, spec.input_size))
    shapes = spec.state_shapes(B)
    h0 = rng.standard_normal(shapes["h"]) if state else None
    c0 = rng.standard_normal(shapes["c"]) if state and spec.cell == "lstm" else None
    lens = rng.integers(1, T + 1, size=B) if lengths else None
    if lengths:
        lens[0] = T  # the longest sequence fills x
    probe = reference.run_case(spec, params, x, h0, c0, lens)
    cot = {k: rng.standard_normal(v.shape) for k, v in probe.items()}
    expected = reference.run_case(spec, params, x, h0, c0, lens, cot)
    return dict(spec=spec, params=params, x=x, h0=h0, c0=c0, lengths=lens, cotangents=cot), expected


def without_b_hn(case):
    """The NNX GRU cannot hold b_hn: give it a case with b_hn = 0 (and recompute)."""
    spec, params = case[0]["spec"], dict(case[0]["params"])
    H = spec.hidden_size
    for l, d in spec.layers_and_directions():
        name = f"bias_hh_{spec.suffix(l, d)}"
        params[name] = params[name].copy()
        params[name][2 * H:] = 0.0
    inputs = dict(case[0], params=params)
    expected = reference.run_case(spec, params, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"],
                                  inputs["cotangents"])
    return inputs, expected


GRID = {
    "lstm_bi2_lengths_state": (RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True), dict(lengths=True, state=True)),
    "gru_bi_lengths_state": (RNNSpec("gru", 3, 4, bidirectional=True), dict(seed=1, lengths=True, state=True)),
    "gru_nobias_batch_first": (RNNSpec("gru", 2, 3, bias=False, batch_first=True), dict(seed=2, T=3)),
    "lstm_proj_nobias_batch_first_lengths": (RNNSpec("lstm", 2, 5, bias=False, batch_first=True, proj_size=2),
                                             dict(seed=3, T=3, lengths=True, state=True)),
}


@pytest.fixture(scope="module")
def cases():
    return {name: make_case(spec, **kw) for name, (spec, kw) in GRID.items()}


@pytest.mark.parametrize("impl", CPU_IMPLS)
@pytest.mark.parametrize("name", list(GRID))
def test_float64_matches_reference(impl, name, cases):
    inputs, expected = cases[name]
    adapter = get_adapter(impl)
    spec = inputs["spec"]
    if impl == "flax_nnx" and spec.cell == "gru" and spec.bias:
        # NNX's GRUCell has no b_hn: it runs a zero b_hn exactly, but b_hn has no gradient there
        assert "b_hn" in adapter.unsupported_reason(spec)
        inputs, expected = without_b_hn(cases[name])
        got = {k: np.array(v) for k, v in JaxAdapter(impl).run_case(**inputs, dtype="float64").items()}
        H = spec.hidden_size
        for l, d in spec.layers_and_directions():
            key = f"grad/bias_hh_{spec.suffix(l, d)}"
            assert np.all(got[key][2 * H:] == 0) and np.any(expected[key][2 * H:] != 0)
            got[key][2 * H:] = expected[key][2 * H:]
        assert_close(expected, got, "float64", f"jax.{impl} {name} (b_hn = 0)", spec=inputs["spec"], x=inputs["x"])
        return
    reason = adapter.unsupported_reason(spec, lengths=inputs["lengths"] is not None)
    if reason:
        assert spec.proj_size, reason  # the only thing a CPU impl may refuse here
        with pytest.raises(rnnbench.jax.UnsupportedConfigError, match="proj_size"):
            adapter.run_case(**inputs)
        return
    got = adapter.run_case(**inputs, dtype="float64")
    assert set(got) == set(expected)
    assert_close(expected, got, "float64", f"jax.{impl} {name}", spec=inputs["spec"], x=inputs["x"])


@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_float32_matches_reference(impl, cases):
    inputs, expected = cases["gru_nobias_batch_first"]
    got = get_adapter(impl).run_case(**inputs, dtype="float32")
    assert_close(expected, got, "float32", f"jax.{impl} float32", spec=inputs["spec"], x=inputs["x"])


# ---- scan -------------------------------------------------------------------------


@pytest.mark.parametrize("options", [dict(unroll=3, remat=True)])
def test_scan_options_compute_the_same_function(options, cases):
    inputs, expected = cases["gru_bi_lengths_state"]
    got = get_adapter("scan", **options).run_case(**inputs, dtype="float64")
    assert_close(expected, got, "float64", f"jax.scan {options}", spec=inputs["spec"], x=inputs["x"])


def test_scan_rejects_bad_options():
    p = init_params(RNNSpec("lstm", 2, 3))
    with pytest.raises(ValueError, match="unroll"):
        rnnbench.jax.lstm(p, np.zeros((2, 1, 2)), unroll=0)
    with pytest.raises(TypeError, match="unknown options.*unrol"):
        rnnbench.jax.lstm(p, np.zeros((2, 1, 2)), unrol=2)


@pytest.mark.parametrize("impl", ["scan"])
def test_check_grads(impl):
    """JAX's own finite-difference check of forward- and reverse-mode derivatives."""
    spec = RNNSpec("lstm", 2, 2, bidirectional=True, proj_size=1)
    rng = np.random.default_rng(5)
    params = {k: jnp.asarray(v) for k, v in init_params(spec, rng).items()}
    x = jnp.asarray(rng.standard_normal((3, 2, 2)))
    h0 = jnp.asarray(rng.standard_normal((2, 2, 1)))
    c0 = jnp.asarray(rng.standard_normal((2, 2, 2)))
    lengths = jnp.array([3, 2])

    def f(params, x, h0, c0):
        out, (h, c) = rnnbench.jax.lstm(params, x, (h0, c0), lengths=lengths, bidirectional=True, proj_size=1,
                                    backend=impl)
        return out, h, c

    check_grads(jax.jit(f), (params, x, h0, c0), order=1, modes=("fwd", "rev"))


# ---- Flax layouts are the shared converters' layouts -------------------------------


@pytest.mark.parametrize("cell,cell_type", [("lstm", "OptimizedLSTMCell"), ("lstm", "LSTMCell"), ("gru", "GRUCell")])
@pytest.mark.parametrize("bias", [True, False])
def test_flax_params_equal_shared_converters(cell, cell_type, bias):
    spec = RNNSpec(cell, 3, 4, num_layers=2, bidirectional=True, bias=bias)
    params = init_params(spec, 7)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    for layer, direction in spec.layers_and_directions():
        p = driver.layer_params(spec, jparams, layer, direction)
        want = to_flax_linen(spec, params, layer, direction, cell_type)["params"]
        got = flax_linen.linen_cell_params(get_jax_cell(cell), p)
        jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, got), want)
        if cell == "gru" and bias:
            with pytest.raises(ConversionError, match="b_hn"):
                to_flax_nnx(spec, params, layer, direction, cell_type)
            continue
        want = to_flax_nnx(spec, params, layer, direction, cell_type)
        got = flax_nnx.nnx_cell_params(get_jax_cell(cell), cell_type, p)
        jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, got), want)


def test_flax_lstm_cell_types_agree():
    spec = RNNSpec("lstm", 2, 3, bidirectional=True)
    params = init_params(spec, 3)
    x = np.random.default_rng(3).standard_normal((4, 2, 2))
    lengths = np.array([4, 2])
    want = rnnbench.jax.lstm(params, x, lengths=lengths, bidirectional=True, backend="scan")
    for impl in ("flax_linen", "flax_nnx"):
        got = rnnbench.jax.lstm(params, x, lengths=lengths, bidirectional=True, backend=impl, cell_type="LSTMCell")
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-12), got, want)


def test_flax_nnx_gru_refuses_nonzero_b_hn():
    spec = RNNSpec("gru", 2, 3, num_layers=2)
    params = init_params(spec, 0)
    x = np.zeros((2, 1, 2))
    with pytest.raises(ConversionError, match=r"bias_hh_l0\[6:9\].*b_hn"):
        rnnbench.jax.gru(params, x, num_layers=2, backend="flax_nnx")
    # under jit the values are unknown at trace time: the check runs with the computation
    with pytest.raises(Exception, match="b_hn"):
        jax.block_until_ready(jax.jit(lambda p: rnnbench.jax.gru(p, x, num_layers=2, backend="flax_nnx"))(params))
    for l in range(2):
        params[f"bias_hh_l{l}"][6:] = 0.0
    out, _ = rnnbench.jax.gru(params, x, num_layers=2, backend="flax_nnx")
    np.testing.assert_allclose(out, rnnbench.jax.gru(params, x, num_layers=2)[0], atol=1e-12)


def test_flax_impls_refuse_proj_size():
    spec = RNNSpec("lstm", 2, 3, proj_size=1)
    for impl in ("flax_linen", "flax_nnx"):
        with pytest.raises(rnnbench.jax.UnsupportedConfigError, match="proj_size"):
            rnnbench.jax.lstm(init_params(spec), np.zeros((2, 1, 2)), proj_size=1, backend=impl)


# ---- cudnn ----------------------------------------------------------------------------


def test_cudnn_layout_and_semantics_match_jax_reference():
    """`flat_weights` is jax.experimental.rnn's layout, and its reference LSTM (the CPU
    twin of the cuDNN kernel, variable lengths included) agrees with rnnbench.jax."""
    from jax.experimental import rnn

    spec = RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True)
    params = {k: jnp.asarray(v) for k, v in init_params(spec, 1).items()}
    w = cudnn.flat_weights(spec, params)
    assert w.shape == (rnn.get_num_params_in_lstm(3, 4, 2, True),)
    w_ih, w_hh, b_ih, b_hh = rnn.unpack_lstm_weights(w, 3, 4, 2, True)
    for i, (l, d) in enumerate(spec.layers_and_directions()):
        s = spec.suffix(l, d)
        for got, name in ((w_ih, "weight_ih"), (w_hh, "weight_hh"), (b_ih, "bias_ih"), (b_hh, "bias_hh")):
            np.testing.assert_array_equal(got[i], params[f"{name}_{s}"])
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((3, 5, 3)))  # batch-major, as the kernel takes it
    h0, c0 = (jnp.asarray(rng.standard_normal((4, 3, 4))) for _ in range(2))
    lengths = jnp.array([5, 2, 1], jnp.int32)
    want = rnn.lstm_ref(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths, 3, 4, 2, 0.0, True)
    out, (h, c) = rnnbench.jax.lstm(params, x, (h0, c0), lengths=lengths, num_layers=2, bidirectional=True,
                                batch_first=True)
    for a, b in zip(want, (out, h, c)):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_cudnn_unavailable_or_refusing_with_reasons():
    reason = rnnbench.jax.unavailable_reason("cudnn")
    has_gpu = any(d.platform == "gpu" for d in jax.devices())
    assert (reason is None) == has_gpu, reason
    if not has_gpu:
        assert "GPU" in reason
        assert "cudnn" not in rnnbench.jax.available_backends()
        with pytest.raises(rnnbench.jax.BackendUnavailableError, match="cudnn.*GPU"):
            rnnbench.jax.lstm(init_params(RNNSpec("lstm", 2, 3)), np.zeros((2, 1, 2)), backend="cudnn")
    assert "GRU" in rnnbench.jax.backends.unsupported_reason("cudnn", RNNSpec("gru", 2, 3), dtype="float32")
    assert "float32" in rnnbench.jax.backends.unsupported_reason("cudnn", RNNSpec("lstm", 2, 3), dtype="float64")


def _lstm_by_jax_reference(x, h0, c0, w, seq_lengths, input_size, hidden_size, num_layers, dropout, bidirectional,
                           precision=None):
    """`jax.experimental.rnn.lstm`'s contract computed by jax's own `lstm_ref` (runs on the CPU)."""
    from jax.experimental import rnn
    W_ih, W_hh, b_ih, b_hh = rnn.unpack_lstm_weights(w, input_size, hidden_size, num_layers, bidirectional)
    return rnn.lstm_ref(x, h0, c0, W_ih, W_hh, b_ih, b_hh, seq_lengths, input_size, hidden_size, num_layers,
                        dropout, bidirectional)


@pytest.mark.parametrize("scale, passes", [(1.0, True), (1.001, False)])
def test_cudnn_self_check_admits_a_right_kernel_and_refuses_a_wrong_one(monkeypatch, scale, passes):
    """jax.cudnn runs only where the kernel, under jit + vjp, agrees with the scan rung: on an
    H200 with jax 0.11.2 it did not, by 0.1 to 2.6.  Here the kernel is jax's own reference
    (right), or the same answer a part in a thousand off (wrong), on the CPU."""
    from jax.experimental import rnn
    monkeypatch.setattr(rnn, "lstm", lambda *a: tuple(v * scale for v in _lstm_by_jax_reference(*a)))
    monkeypatch.setattr(cudnn, "_CHECKED", {})
    cpu = jax.devices("cpu")[0]
    monkeypatch.setattr(jax, "devices", lambda *a: [cpu])  # unavailable_reason sees a "GPU"
    reason = cudnn.unavailable_reason()
    assert (reason is None) == passes, reason
    if not passes:
        assert "self-check" in reason and "differ from the scan rung" in reason
    assert cudnn._CHECKED == {cpu: reason}  # once per device and process


def test_the_jax_rungs_compute_float32_in_ieee_float32():
    """XLA may run float32 products in TF32 on a GPU; every jitted parity case and workload is
    called under `default_matmul_precision("highest")` (part of jit's cache key)."""
    from rnnbench.jax import adapter
    seen = []
    f = adapter._jit(lambda a: (seen.append(jax.config.jax_default_matmul_precision), a @ a)[1],
                     jax.devices("cpu")[0])
    f(jnp.ones((2, 2), jnp.float32))
    assert seen == ["highest"]
    assert jax.config.jax_default_matmul_precision is None  # only inside the call


@pytest.mark.gpu
@pytest.mark.skipif(not any(d.platform == "gpu" for d in jax.devices()), reason="needs a CUDA GPU")
def test_cudnn_matches_reference_on_gpu():
    spec = RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True)
    inputs, expected = make_case(spec, lengths=True, state=True)
    got = get_adapter("cudnn").run_case(**inputs, dtype="float32", device="cuda")
    assert_close(expected, got, "float32", "jax.cudnn", spec=inputs["spec"], x=inputs["x"])
