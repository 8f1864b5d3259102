"""int8 inference (`rnnbench.torch.quantized`, `rnnbench.jax.quantized`): quantized for real, close to
the float64 reference, smaller; and the upstream no-op a user would otherwise believe."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec

torch = pytest.importorskip("torch")

SPECS = [RNNSpec("lstm", 6, 64, num_layers=2, bidirectional=True), RNNSpec("gru", 6, 64, batch_first=True)]
# int8 weights err by up to max|w|/254 per row, activations (dynamic) likewise: measured
# max output errors 1e-3 to 1.2e-2 at H = 128, T = 20; 5e-2 flags a broken kernel, and
# an error below 1e-5 a "quantized" model that still runs in float.
INT8_MAX_ERROR, FLOAT_LEVEL = 5e-2, 1e-5


def _case(spec):
    rng = np.random.default_rng(0)
    params = init_params(spec, rng)
    shape = (3, 7, spec.input_size) if spec.batch_first else (7, 3, spec.input_size)
    x = rng.standard_normal(shape)
    return params, x, reference.run_case(spec, params, x)


def _torch_module(spec, params):
    cls = torch.nn.LSTM if spec.cell == "lstm" else torch.nn.GRU
    rnn = cls(spec.input_size, spec.hidden_size, num_layers=spec.num_layers, batch_first=spec.batch_first,
              bidirectional=spec.bidirectional)
    rnn.load_state_dict({k: torch.as_tensor(v, dtype=torch.float32) for k, v in params.items()})
    return rnn.eval()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.cell)
def test_torch_int8_methods(spec):
    from rnnbench.torch import quantized
    params, x, want = _case(spec)
    rnn = _torch_module(spec, params)
    float_bytes = quantized.model_bytes(rnn)
    for method in quantized.METHODS:
        q = quantized.quantize(rnn, method)
        out, hidden = q(torch.as_tensor(x, dtype=torch.float32))
        h_n = hidden[0] if spec.cell == "lstm" else hidden
        err = max(np.abs(out.double().numpy() - want["output"]).max(), np.abs(h_n.double().numpy() - want["h_n"]).max())
        if method == "float":
            assert err < FLOAT_LEVEL, err
        else:
            assert FLOAT_LEVEL < err < INT8_MAX_ERROR, (method, err)
            assert quantized.model_bytes(q) < 0.5 * float_bytes, method


def test_torch_quantize_refuses_a_silent_no_op(monkeypatch):
    from rnnbench.torch import quantized
    monkeypatch.setattr(torch.ao.quantization, "quantize_dynamic", lambda model, *a, **k: model)
    with pytest.raises(RuntimeError, match="quantized 0 of the 2 Linear GEMMs"):
        quantized.quantize(torch.nn.LSTM(3, 4), "ao_dynamic")
    with pytest.raises(ValueError, match="method must be one of"):
        quantized.quantize(torch.nn.LSTM(3, 4), "int4")


def test_quantize_dynamic_on_nn_lstm_is_a_silent_no_op_in_this_torch():
    """Documented upstream behaviour (docs/precision.md): `{nn.LSTM}` leaves the float LSTM in
    place.  If a torch release makes it quantize, this test fails and the docs change."""
    lstm = torch.nn.LSTM(8, 16).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(lstm, {torch.nn.LSTM}, dtype=torch.qint8)
    x = torch.randn(5, 2, 8)
    assert type(q) is torch.nn.LSTM
    assert torch.equal(q(x)[0], lstm(x)[0])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.cell)
def test_jax_int8_methods(spec):
    pytest.importorskip("jax")
    from rnnbench.jax import quantized
    params, x, want = _case(spec)
    q = quantized.quantize(params, spec)
    for method in quantized.METHODS:
        out, h_n, _ = quantized.run(q, x, method=method)
        err = max(np.abs(np.asarray(out, np.float64) - want["output"]).max(),
                  np.abs(np.asarray(h_n, np.float64) - want["h_n"]).max())
        if method == "float":
            assert err < FLOAT_LEVEL, err
        else:
            assert FLOAT_LEVEL < err < INT8_MAX_ERROR, (method, err)
    assert quantized.model_bytes(q) < 0.5 * quantized.model_bytes(q, "float")
