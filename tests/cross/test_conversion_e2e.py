"""Weight conversion end to end: train in PyTorch, convert, run in the target's own code.

A 2-layer bidirectional `nn.LSTM` / `nn.GRU` (torch.native) is trained a few steps on
the sine task (so every parameter, both biases included, moves away from its initial
value), converted with `rnnbench.converters`, and run on fresh inputs with initial
states:

- Flax linen: `flax.linen.RNN` over each converted cell (`LSTMCell`,
  `OptimizedLSTMCell`, `GRUCell`), reverse direction with `reverse=True,
  keep_order=True`, layers chained by hand;
- Flax NNX: `flax.nnx.RNN` over `nnx.LSTMCell` / `OptimizedLSTMCell` / `GRUCell`;
  a trained GRU with biases cannot be held by the NNX GRU (no b_hn) and must be refused
  with a clear error, so the NNX GRU runs a trained `bias=False` GRU;
- ONNX and Keras: no runtime is installed here, and `tests/converters/test_converters.py` already
  evaluates those formats' equations in NumPy; here the trained weights go through the
  layouts and back and must give the same outputs in the float64 reference.

All in float64; outputs, h_n and c_n must match `nn.LSTM`/`nn.GRU` to 1e-12 (the same
function in another summation order).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rnnbench import reference  # noqa: E402
from rnnbench.converters import (
    ConversionError, flax_carry, from_keras_model, from_onnx, to_flax_linen, to_flax_nnx, to_keras_model, to_onnx)
from rnnbench.core.tasks import TrainConfig  # noqa: E402
from rnnbench.torch import train as torch_train  # noqa: E402

ATOL = 1e-12
T, B = 6, 3


def trained(cell: str, bias: bool = True):
    config = TrainConfig(task="sine", seq_len=12, cell=cell, hidden_size=5, num_layers=2, bidirectional=True,
                         bias=bias, batch_size=8, steps=5, optimizer="adam", lr=0.05, clip_norm=1.0, seed=7)
    start, _ = config.initial_params()
    result = torch_train.train(config, "native", "float64")
    for name, value in result.params.items():  # every parameter was trained
        assert not np.array_equal(value, start[name]), f"{name} did not change in training"
    return config.spec(), result.params


_TRAINED = {}


def model(cell: str, bias: bool = True):
    if (cell, bias) not in _TRAINED:
        _TRAINED[cell, bias] = trained(cell, bias)
    return _TRAINED[cell, bias]


def inputs(spec, seed=11):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, B, spec.input_size))
    shapes = spec.state_shapes(B)
    h0 = rng.standard_normal(shapes["h"])
    c0 = rng.standard_normal(shapes["c"]) if spec.cell == "lstm" else None
    return x, h0, c0


def torch_forward(spec, params, x, h0, c0):
    """`nn.LSTM`/`nn.GRU` itself, float64: (output, h_n, c_n)."""
    cls = torch.nn.LSTM if spec.cell == "lstm" else torch.nn.GRU
    m = cls(**spec.torch_kwargs(), dtype=torch.float64)
    m.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()})
    with torch.no_grad():
        if spec.cell == "lstm":
            out, (h_n, c_n) = m(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
            return out.numpy(), h_n.numpy(), c_n.numpy()
        out, h_n = m(torch.from_numpy(x), torch.from_numpy(h0))
        return out.numpy(), h_n.numpy(), None


def assert_same(spec, got, want, what):
    for name, g, w in zip(("output", "h_n", "c_n"), got, want):
        if w is None:
            continue
        np.testing.assert_allclose(np.asarray(g), w, rtol=0, atol=ATOL, err_msg=f"{what}: {name}")


def _split_carry(spec, carry):
    """Flax carry -> (h, c): LSTM carries are (c, h)."""
    return (carry[1], carry[0]) if spec.cell == "lstm" else (carry, None)


def stacked(spec, x, h0, c0, run_direction):
    """Chain layers and directions PyTorch's way around a per-direction runner.

    run_direction(layer, direction, x_layer, carry) -> (carry_n, outputs (T, B, H)).
    """
    h_n, c_n = np.zeros_like(h0), (None if c0 is None else np.zeros_like(c0))
    layer_in = x
    for layer in range(spec.num_layers):
        outs = []
        for direction in range(spec.num_directions):
            carry = flax_carry(spec, h0, c0, layer, direction)
            carry_n, out = run_direction(layer, direction, layer_in, carry)
            h, c = _split_carry(spec, carry_n)
            k = layer * spec.num_directions + direction
            h_n[k] = np.asarray(h)
            if c_n is not None:
                c_n[k] = np.asarray(c)
            outs.append(np.asarray(out))
        layer_in = np.concatenate(outs, axis=-1)
    return layer_in, h_n, c_n


@pytest.mark.parametrize("cell,cell_type", [("lstm", "LSTMCell"), ("lstm", "OptimizedLSTMCell"), ("gru", "GRUCell")])
def test_flax_linen_rnn_runs_the_trained_model(cell, cell_type):
    jax = pytest.importorskip("jax")
    nn = pytest.importorskip("flax.linen")
    spec, params = model(cell)
    x, h0, c0 = inputs(spec)
    with jax.enable_x64(True):
        def run_direction(layer, direction, layer_in, carry):
            rnn = nn.RNN(getattr(nn, cell_type)(features=spec.hidden_size, param_dtype=np.float64),
                         time_major=True, return_carry=True, reverse=direction == 1, keep_order=True)
            variables = {"params": {"cell": to_flax_linen(spec, params, layer, direction, cell_type)["params"]}}
            return rnn.apply(variables, layer_in, initial_carry=carry)

        got = stacked(spec, x, h0, c0, run_direction)
    assert_same(spec, got, torch_forward(spec, params, x, h0, c0), f"flax linen {cell_type}")


@pytest.mark.parametrize("cell,cell_type,bias", [("lstm", "LSTMCell", True), ("lstm", "OptimizedLSTMCell", True),
                                                 ("gru", "GRUCell", False)])
def test_flax_nnx_rnn_runs_the_trained_model(cell, cell_type, bias):
    jax = pytest.importorskip("jax")
    nnx = pytest.importorskip("flax.nnx")
    spec, params = model(cell, bias)
    x, h0, c0 = inputs(spec)
    with jax.enable_x64(True):
        def run_direction(layer, direction, layer_in, carry):
            cell_module = getattr(nnx, cell_type)(spec.layer_input_size(layer), spec.hidden_size,
                                                  param_dtype=np.float64, rngs=nnx.Rngs(0))
            state = nnx.state(cell_module, nnx.Param)
            nnx.replace_by_pure_dict(state, to_flax_nnx(spec, params, layer, direction, cell_type=cell_type))
            nnx.update(cell_module, state)
            rnn = nnx.RNN(cell_module, time_major=True, return_carry=True, reverse=direction == 1, keep_order=True)
            return rnn(layer_in, initial_carry=carry)

        got = stacked(spec, x, h0, c0, run_direction)
    assert_same(spec, got, torch_forward(spec, params, x, h0, c0), f"flax nnx {cell_type}")


def test_flax_nnx_refuses_a_trained_gru_with_biases():
    spec, params = model("gru", True)
    with pytest.raises(ConversionError, match="b_hn"):
        to_flax_nnx(spec, params, 0, 0)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("target", ["onnx", "keras"])
def test_onnx_and_keras_layouts_carry_the_trained_model(cell, target):
    spec, params = model(cell)
    if target == "onnx":
        back = from_onnx(spec, to_onnx(spec, params))
    else:
        back = from_keras_model(spec, to_keras_model(spec, params))
    x, h0, c0 = inputs(spec)
    ref = reference.run_case(spec, back, x, h0, c0)
    assert_same(spec, (ref["output"], ref["h_n"], ref.get("c_n")), torch_forward(spec, params, x, h0, c0),
                f"{target} layout and back")
