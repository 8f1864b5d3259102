"""Reduced precision: the precision axis (`rnnbench.core.precision`) as users meet it in each framework.

The parity matrix (`test_parity_matrix.py`) runs every rung on the shared vectors in every
precision this CPU has arithmetic for (bfloat16, amp_bfloat16 next to float32/float64),
judged by the derived rule of `rnnbench.core.tolerances`.  Here: the rule is not vacuous in bf16,
float16 on a CPU without float16 arithmetic is refused with the reason, autocast and Flax's
`dtype=` behave as their libraries do (float32 parameters get float32 gradients).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from rnnbench import parity
from rnnbench.core import precision, registry
from rnnbench.core.tolerances import bounds, case_sizes, max_errors
from rnnbench.vectors import load_cases

CASES = list(load_cases())
NO_FP16 = precision.device_reason("float16", "cpu") is not None
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_precision_names_and_errors():
    assert precision.precision("amp_bfloat16").compute == "bfloat16"
    assert precision.precision("amp_bfloat16").storage == "float32"
    assert not precision.precision("bfloat16").mixed
    with pytest.raises(ValueError, match="dtype must be one of float64, float32, bfloat16"):
        precision.precision("int4")
    assert precision.device_reason("float16", "cpu", frozenset({"avx512_fp16"})) is None
    assert "neither AVX512-FP16 nor AMX-FP16" in precision.device_reason("float16", "cpu", frozenset({"avx2"}))
    assert precision.device_reason("float16", "cuda", frozenset()) is None
    assert "no AMX" in precision.isa_summary(frozenset({"avx512_bf16"}))


@pytest.mark.parametrize("dtype", ["bfloat16", "amp_bfloat16"])
def test_the_rule_is_not_vacuous_in_bf16(dtype):
    """The largest error over the vectors reaches a sizeable fraction of the bound (measured
    0.05-0.12 on every rung): the bound is derived, not a loose constant."""
    adapter = registry.get("torch.eager").adapter()
    worst = 0.0
    for case in CASES:
        got = adapter.run_case(case.spec, case.params, **parity.case_inputs(case), cotangents=case.cotangents,
                               dtype=dtype)
        expected = parity.expected_results(case)
        limits = bounds(expected, dtype, case.spec, *case_sizes(case.spec, case.x))
        errors = max_errors(expected, got)
        worst = max(worst, max(errors[k] / limits[k] for k in errors))
    assert 0.02 < worst <= 1.0, worst


@pytest.mark.skipif(not NO_FP16, reason="this CPU has float16 arithmetic")
@pytest.mark.parametrize("impl", registry.available("cpu"))
def test_float16_on_this_cpu_is_refused_naming_rung_dtype_and_device(impl):
    case = next(c for c in CASES if c.spec.cell == "lstm" and c.lengths is None)
    declared = registry.get(impl).declared().dtypes
    for dtype in ("float16", "amp_float16"):
        reason = registry.get(impl).unsupported_reason(case.spec, dtype=dtype, device="cpu")
        # a rung that declares the dtype is refused by this CPU; one that does not, by its declaration
        want = f"{impl} cannot run {dtype} on cpu" if dtype in declared else f"{impl} supports dtypes .*, not {dtype}"
        assert reason is not None and re.match(want, reason), reason
        with pytest.raises(ValueError, match=want):
            registry.get(impl).adapter().run_case(case.spec, case.params, case.x, dtype=dtype, device="cpu")


@pytest.mark.skipif(not NO_FP16, reason="this CPU has float16 arithmetic")
def test_float16_modules_and_functions_refuse_on_this_cpu():
    torch = pytest.importorskip("torch")
    import rnnbench.torch
    for backend in rnnbench.torch.available_backends():
        rnn = rnnbench.torch.LSTM(3, 4, backend=backend).half()
        declared = "float16" in rnnbench.torch.capabilities(backend).dtypes
        with pytest.raises(RuntimeError, match=f"torch.{backend} cannot run float16 on cpu" if declared
                           else f"torch.{backend} supports dtypes .*, not float16"):
            rnn(torch.zeros(2, 1, 3, dtype=torch.float16))
    jnp = pytest.importorskip("jax.numpy")
    import rnnbench.jax
    from rnnbench.core.params import init_params
    from rnnbench.core.spec import RNNSpec
    params = init_params(RNNSpec("lstm", 3, 4))
    with pytest.raises(rnnbench.jax.UnsupportedConfigError, match="jax.scan cannot run float16 on cpu"):
        rnnbench.jax.lstm(params, jnp.zeros((2, 1, 3), jnp.float16))
    with pytest.raises(rnnbench.jax.UnsupportedConfigError, match="float16 on cpu"):
        rnnbench.jax.lstm(params, jnp.zeros((2, 1, 3)), dtype=jnp.float16)


def test_torch_autocast_as_nn_lstm_does():
    """Under autocast a float32 module takes a bf16 input (nn.RNNBase skips its dtype check
    there); outside it the mismatch is nn's ValueError; float32 parameters get float32 grads."""
    torch = pytest.importorskip("torch")
    import rnnbench.torch
    torch.manual_seed(0)
    x = torch.randn(5, 2, 3)
    for backend in rnnbench.torch.available_backends():
        rnn = rnnbench.torch.LSTM(3, 4, backend=backend)
        ref = torch.nn.LSTM(3, 4)
        ref.load_state_dict(rnn.state_dict())
        refused = rnnbench.torch.unsupported_reason(backend, rnn.spec, dtype="amp_bfloat16", device="cpu")
        if refused:  # a rung that does not compute bfloat16 (fused), or a CPU without it (native): its reason
            with pytest.raises(rnnbench.torch.UnsupportedConfigError, match="bfloat16"), \
                    torch.autocast("cpu", dtype=torch.bfloat16):
                rnn(x.bfloat16())
            continue
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, (h, c) = rnn(x.bfloat16())
            want, _ = ref(x.bfloat16())
        assert out.dtype == want.dtype == torch.bfloat16, (backend, out.dtype)
        torch.testing.assert_close(out.float(), want.float(), atol=3e-2, rtol=0)
        out.float().sum().backward()
        assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in rnn.parameters()), backend
        with pytest.raises(ValueError, match="does not match weight dtype"):
            rnn(x.bfloat16())


def test_jax_compute_dtype_is_flax_dtype():
    """`dtype=` computes in bf16 (outputs bf16) while float32 parameters get float32 gradients,
    as Flax's `dtype`/`param_dtype` split; the NNX modules take both."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from flax import nnx

    import rnnbench.jax
    from rnnbench.core.params import init_params
    from rnnbench.core.spec import RNNSpec
    params = {k: jnp.asarray(v, jnp.float32) for k, v in init_params(RNNSpec("gru", 3, 4)).items()}
    x = jnp.ones((5, 2, 3), jnp.float32)
    out, h = rnnbench.jax.gru(params, x, dtype=jnp.bfloat16)
    assert out.dtype == h.dtype == jnp.bfloat16
    grads = jax.grad(lambda p: rnnbench.jax.gru(p, x, dtype=jnp.bfloat16)[0].astype(jnp.float32).sum())(params)
    assert all(g.dtype == jnp.float32 for g in grads.values())
    model = rnnbench.jax.LSTM(3, 4, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    out, (h, c) = model(x)
    assert out.dtype == jnp.bfloat16 and model.weight_ih_l0[...].dtype == jnp.float32
    full, _ = rnnbench.jax.LSTM(3, 4, rngs=nnx.Rngs(0))(x)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(full), atol=3e-2)
