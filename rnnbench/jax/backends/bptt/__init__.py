"""`bptt`: `lax.scan` forward, hand-written backward (`jax.custom_vjp`) per layer and direction.

Why: differentiating `lax.scan` (the `scan` backend) makes JAX's backward scan accumulate
the weight gradients one step at a time (`dW_hh += dG_t^T h_{t-1}`, a skinny GEMM plus
an add per step).  Here, as in `rnnbench.torch`'s `bptt` (a `torch.autograd.Function`), the
backward scan does only what is inherently sequential and emits the gate gradients; every
weight gradient is then ONE GEMM over all T*B rows.  The kernels keep their own loops
(a forward that saves residuals): `lstm_gru` holds the LSTM and GRU, `cells` the
catalogue cells with a hand-written backward, `common` what both use.  A user's own
cell has no hand-written backward and runs on `scan`.
"""

from __future__ import annotations

from rnnbench.core.capabilities import Capabilities

from rnnbench.core.params import LayerParams

from ... import cells as jax_cells
from ...cells import valid_steps
from . import steps as cells, lstm_gru

OPTIONS: dict = {}

# cell -> run(p: LayerParams, x, state, valid (T, B, 1) or None, reverse) -> (output, state_n)
DIRECTIONS = {"lstm": lstm_gru.lstm, "gru": lstm_gru.gru, "ln_lstm": cells.ln_lstm,
              "peephole_lstm": cells.peephole_lstm, "gru_reset_before": cells.gru_reset_before}

CAPABILITIES = Capabilities(
    cells=tuple(DIRECTIONS), proj_size=True,
    why_not={"cell": "the other cells have no hand-written backward here; jax.scan runs any registered cell "
                     "(JAX autodiff)"})


def hand_written_cells() -> tuple[str, ...]:
    """The cells with a hand-written backward here."""
    return tuple(DIRECTIONS)


def run_direction(cell: jax_cells.JaxCell, p: LayerParams, x, state: tuple, lengths, *, reverse: bool):
    """One direction over time-major x (T, B, I); see `rnnbench.jax.stack`."""
    if cell.name not in DIRECTIONS:
        raise ValueError(f"jax.bptt runs {', '.join(DIRECTIONS)} only, not {cell.name!r}")
    if p.w_hr is not None and not cell.defn.proj_size:
        raise ValueError(f"cell {cell.name!r} does not support proj_size")
    valid = valid_steps(lengths, x.shape[0])
    return DIRECTIONS[cell.name](p, x, state, valid, reverse)
