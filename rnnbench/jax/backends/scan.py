"""`scan`: `lax.scan` over time with the input projection hoisted out of the loop.

Per layer and direction, for every cell with a JAX step (`rnnbench.jax.cells`, a user's own
included):

    q = cell.prepare(p)                     the layer's arrays as the step wants them
    x_proj = cell.project(x, q)             one (T*B, I) x (I, G*H) GEMM for all steps
    cells.time_loop(cell.step, x_proj, ...) lax.scan of the step, masked with lengths

For lstm and gru the step adds the bias and does one (B, H) x (H, G*H) GEMM per step
with the gate math fused by XLA (see `rnnbench.jax.cells`: the LSTM's `b_ih + b_hh`, the
GRU's `b_hn` kept with `W_hn h`, `proj_size`'s `W_hr`).

Options:
- `unroll` (int, default `DEFAULT_UNROLL` = 1): steps per loop iteration of `lax.scan`.
  1 because longer unrolls did not pay on XLA's CPU backend while compile time grows
  about linearly with unroll (measured; see the JAX page of the docs).
- `remat` (bool, default False): wrap the step in `jax.checkpoint`, so backward
  recomputes the gate activations instead of storing them (less memory, more compute).

Variable lengths: both directions run all T steps with a mask; a sequence's state is
frozen (and its output zero) at steps `t >= len`.  The reverse direction is a reversed
scan, so its state stays `h0` until `t = len - 1`: it runs over each sequence's valid
part, reversed, as PyTorch does -- no gather of the input needed.
"""

from __future__ import annotations

from rnnbench.core.capabilities import ANY_CELL, Capabilities

from rnnbench.core.params import LayerParams

from .. import cells
from ._common import check_unroll

DEFAULT_UNROLL = 1
OPTIONS = {"unroll": DEFAULT_UNROLL, "remat": False}
CAPABILITIES = Capabilities(cells=ANY_CELL, proj_size=True)


def _check_options(unroll, remat):
    check_unroll(unroll)
    if not isinstance(remat, bool):
        raise ValueError(f"remat must be a bool, got {remat!r}")


def run_direction(cell: cells.JaxCell, p: LayerParams, x, state: tuple, lengths, *, reverse: bool,
                  unroll: int = DEFAULT_UNROLL, remat: bool = False):
    """One direction over time-major x (T, B, I); see `rnnbench.jax.stack`."""
    _check_options(unroll, remat)
    if p.w_hr is not None and not cell.defn.proj_size:
        raise ValueError(f"cell {cell.name!r} does not support proj_size")
    q = cell.prepare(p)
    x_proj = cells.project_all(cell, x, q)
    return cells.time_loop(cell.step, x_proj, state, q, lengths, reverse=reverse, unroll=unroll, remat=remat)
