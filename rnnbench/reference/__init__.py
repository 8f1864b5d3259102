"""The float64 NumPy reference: forward and backward (BPTT) for every cell in the catalogue.

Every implementation is checked against this package.  It follows PyTorch's math and
`nn.LSTM`/`nn.GRU` semantics exactly (docs/contract.md):

- multiple layers (layer k > 0 reads the concatenated outputs of layer k-1), both
  directions, `batch_first`, `bias=False`, initial states, LSTM `proj_size`;
- variable lengths with packed-sequence semantics: outputs past a sequence's length are
  zero, `h_n`/`c_n` hold the state at its last valid step, and the reverse direction
  runs over each sequence's valid part, reversed;
- `h_n`/`c_n` ordered layer-major, then direction: `(num_layers * num_directions, B, .)`.

Its modules, one idea each:

- `steps`: each catalogue cell's step and hand-written step backward (`lstm`, `gru`,
  `ln_lstm`, `peephole_lstm`, `gru_reset_before`), and `sigmoid`, `layer_norm`;
- `table`: the reference's cell table, a `rnnbench.core.catalogue.CellTable` like each framework's,
  of `CellStep`s (step, step backward) by cell name, and `complex_step_backward`, the
  gradient of a cell that has no hand-written backward;
- `driver`: the input checks and the layer/direction/lengths driver every cell shares
  (`forward`, `backward`, `run_case`), so adding a cell never means editing the driver;
- `check`: `check_gradients`, backward against finite differences (for new cells).

Your own cell: register its `rnnbench.core.catalogue.CellDef`, then its NumPy step with
`register_cell_step(name, step)`.  Without a hand-written backward the reference
differentiates the step by the complex step method (`complex_step_backward`): exact to
machine precision in float64, provided the step is written with complex-safe NumPy
(arithmetic, `@`, `np.tanh`, `np.exp`, `np.sqrt`, `np.split`, `np.concatenate`, and this
package's `sigmoid`; not `np.abs`, `np.maximum`, comparisons on values, or `.real`).

Step signature.  `state` is a tuple: `(h, c)` for the "lstm" family, `(h,)` for "gru";
rows are sequences (batch-major, `x` is (B, in)).  `p` maps short parameter names to
this layer/direction's arrays: "weight_ih", "weight_hh", "bias_ih", "bias_hh" (zeros
when `spec.bias` is False, so a step never needs to test for them), "weight_hr" (with
proj_size) and each extra parameter's prefix (e.g. "peephole").

    plain step (user cells):     step(x, state, p) -> new_state
    hand-written pair:           step(x, state, p) -> (new_state, saved)
                                 step_backward(d_new_state, saved, p, grads) -> (dx, d_state)

`new_state[0]` is the step's output h'.  `step_backward` receives dL/d(new_state) (the
h' entry already includes the output's cotangent), accumulates parameter gradients into
`grads[short name]` in place, and returns dL/dx and dL/d(state).

Dropout: PyTorch applies dropout only between layers and only in training, drawing random
masks, so it cannot be reproduced deterministically.  `spec.dropout > 0` with
`num_layers > 1` raises `ValueError`; with one layer dropout has no effect in PyTorch
either, and the reference computes the same function.

API:
- `forward(spec, params, x, h0=None, c0=None, lengths=None) -> ForwardResult`
  (`.output`, `.h_n`, `.c_n` and the `.cache` that `backward` needs);
- `backward(spec, fwd, cotangents) -> dict` of gradients keyed "grad/x",
  "grad/h0", "grad/c0" (LSTM family), "grad/<param name>";
- `run_case(...)`: both, returning the dict of `rnnbench.core.adapter.Adapter.run_case`;
- `register_cell_step`, `get_cell_step`, `CELLS`, `complex_step_backward`, `sigmoid`, `layer_norm`;
- `check_gradients(spec)`: backward vs finite differences on a tiny random case (for new cells).
"""

from __future__ import annotations

from .check import check_gradients
from .stack import ForwardResult, backward, forward, run_case
from .steps import (
    LAYER_NORM_EPS, gru_reset_before_step, gru_reset_before_step_backward, gru_step, gru_step_backward, layer_norm,
    layer_norm_backward, ln_lstm_step, ln_lstm_step_backward, lstm_step, lstm_step_backward, peephole_lstm_step,
    peephole_lstm_step_backward, sigmoid)
from .table import CELLS, COMPLEX_STEP, CellStep, complex_step_backward, get_cell_step, register_cell_step

__all__ = ["ForwardResult", "forward", "backward", "run_case", "CellStep", "CELLS", "register_cell_step",
           "get_cell_step", "complex_step_backward", "check_gradients", "COMPLEX_STEP", "sigmoid", "layer_norm",
           "layer_norm_backward", "LAYER_NORM_EPS", "lstm_step", "lstm_step_backward", "gru_step",
           "gru_step_backward", "ln_lstm_step", "ln_lstm_step_backward", "peephole_lstm_step",
           "peephole_lstm_step_backward", "gru_reset_before_step", "gru_reset_before_step_backward"]
