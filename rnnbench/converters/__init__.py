"""Weight converters: canonical parameters (PyTorch `state_dict`) <-> other layouts.

Pure NumPy, both directions.  Each target has `to_<target>(spec, params, ...)` and
`from_<target>(spec, tree, ...)`:

- `flax_linen`: linen `LSTMCell`/`OptimizedLSTMCell`/`GRUCell` variables per layer/direction.
- `flax_nnx`: NNX `LSTMCell`/`OptimizedLSTMCell`/`GRUCell` param pure dicts per layer/direction.
- `onnx`: W, R, B (P) and attributes of one ONNX `LSTM`/`GRU` node per layer (gate orders
  i,o,f,c / z,r,h); also `peephole_lstm` (P, order i,o,f) and `gru_reset_before`
  (linear_before_reset=0).  `read_onnx(nodes)` infers `(spec, params)`, choosing the cell.
- `keras`: Keras 3 `LSTM` / `GRU(reset_after=True)` weights per layer/direction; also
  `gru_reset_before` as `GRU(reset_after=False)`.  `read_keras_model(trees)` infers `(spec, params)`.

Custom cells a target has no layer for (`ln_lstm` everywhere; `peephole_lstm` in Keras
and Flax; `gru_reset_before` in Flax) raise `ConversionError` naming the cell.

A target that cannot hold a canonical model raises `ConversionError` naming the
parameter, unless the values it would lose are zero or fold exactly (b_ih + b_hh).
Converting back from a one-bias layout gives `b_ih` = folded bias, `b_hh` = 0, so
compare round trips with `effective_biases`, which captures the function.
"""

from ._common import ConversionError, effective_biases
from .flax_linen import (
    flax_carry, from_flax_linen, from_flax_linen_model, linen_param_shapes, to_flax_linen, to_flax_linen_model)
from .flax_nnx import from_flax_nnx, from_flax_nnx_model, nnx_param_shapes, to_flax_nnx, to_flax_nnx_model
from .keras import from_keras, from_keras_model, keras_weight_shapes, read_keras_model, to_keras, to_keras_model
from .onnx import from_onnx, from_onnx_layer, onnx_attributes, read_onnx, to_onnx, to_onnx_layer

__all__ = [
    "ConversionError", "effective_biases", "flax_carry",
    "to_flax_linen", "from_flax_linen", "to_flax_linen_model", "from_flax_linen_model", "linen_param_shapes",
    "to_flax_nnx", "from_flax_nnx", "to_flax_nnx_model", "from_flax_nnx_model", "nnx_param_shapes",
    "to_onnx", "from_onnx", "to_onnx_layer", "from_onnx_layer", "onnx_attributes", "read_onnx",
    "to_keras", "from_keras", "to_keras_model", "from_keras_model", "keras_weight_shapes", "read_keras_model",
]
