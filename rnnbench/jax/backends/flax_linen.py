"""`flax_linen`: `flax.linen.RNN` over `OptimizedLSTMCell` / `LSTMCell` / `GRUCell`.

One layer is `nn.RNN(cell, time_major=True)`, or `nn.Bidirectional(fwd, bwd)` for two
directions, applied to variables built from the canonical parameters; so this backend
runs a whole stack (`run_stack`), layer by layer, with Flax's own loop.  The variables
follow `rnnbench.converters.to_flax_linen` exactly (tests pin the two together); they are
built here with `jax.numpy` because the shared converter is NumPy and cannot be traced,
and this backend must stay differentiable in the canonical params and `jit`-able.

Where linen's semantics differ from PyTorch's, this module adapts at the boundary:

- the LSTM carry is `(c, h)` (c first): `h0`/`c0` go in and `h_n`/`c_n` come out swapped;
- linen's cells have one bias per gate: LSTM `h{gate}.bias = b_ih + b_hh`, GRU
  `i{r,z}.bias = b_i{r,z} + b_h{r,z}`, `in.bias = b_in`, `hn.bias = b_hn` (exact: every
  canonical GRU fits); with `bias=False` the Flax biases are zeros;
- with `seq_lengths` linen returns the carry at each sequence's last valid step and runs
  the reverse direction over the valid part reversed (`flip_sequences`), like PyTorch,
  but leaves the outputs past a length unspecified: they are zeroed here;
- linen's LSTM cells have no output projection: `proj_size > 0` is unsupported.

Options: `cell_type` ("OptimizedLSTMCell" (default) or "LSTMCell" for an LSTM; a GRU
is always "GRUCell"), `unroll` (steps per loop iteration of the scan).
"""

from __future__ import annotations

import jax.numpy as jnp

from rnnbench.core.capabilities import Capabilities

from rnnbench.core.params import LayerParams, layer_params

from .. import cells
from ._common import (
    LSTM_CELL_TYPES, biases_or_zeros, check_cell_type, check_unroll, from_carry, to_carry, zero_past_lengths)

OPTIONS = {"cell_type": "OptimizedLSTMCell", "unroll": 1}
__all__ = ["OPTIONS", "LSTM_CELL_TYPES", "CAPABILITIES", "LINEN_CELLS", "unavailable_reason", "linen_cell_params",
           "run_stack"]


def unavailable_reason(device: str | None = None) -> str | None:
    try:
        import flax.linen  # noqa: F401
    except ImportError as e:
        return f"flax is not installed ({e})"
    return None


def lstm_params(p: LayerParams) -> dict:
    """A linen LSTM cell's param tree (either cell type): gates i, f, g, o, biases folded."""
    b_ih, b_hh = biases_or_zeros(p)
    tree = {}
    for g, w_i, w_h, bi, bh in zip("ifgo", *(jnp.split(a, 4) for a in (p.w_ih, p.w_hh, b_ih, b_hh))):
        tree[f"i{g}"] = {"kernel": w_i.T}
        tree[f"h{g}"] = {"kernel": w_h.T, "bias": bi + bh}
    return tree


def gru_params(p: LayerParams) -> dict:
    """linen's GRUCell param tree: r, z biases folded, `in` with b_in, `hn` with b_hn."""
    b_ih, b_hh = biases_or_zeros(p)
    w_ih, w_hh, bi, bh = (dict(zip("rzn", jnp.split(a, 3))) for a in (p.w_ih, p.w_hh, b_ih, b_hh))
    tree = {}
    for g in "rz":
        tree[f"i{g}"] = {"kernel": w_ih[g].T, "bias": bi[g] + bh[g]}
        tree[f"h{g}"] = {"kernel": w_hh[g].T}
    tree["in"] = {"kernel": w_ih["n"].T, "bias": bi["n"]}
    tree["hn"] = {"kernel": w_hh["n"].T, "bias": bh["n"]}
    return tree


# cell -> (param tree of one layer/direction, the linen cell: make(nn, hidden_size, cell_type))
LINEN_CELLS = {
    "lstm": (lstm_params, lambda nn, H, cell_type: getattr(nn, cell_type)(H)),
    "gru": (gru_params, lambda nn, H, cell_type: nn.GRUCell(H)),
}

CAPABILITIES = Capabilities(
    cells=tuple(LINEN_CELLS), proj_size=False,
    why_not={"cell": "Flax's built-in OptimizedLSTMCell/LSTMCell/GRUCell have no layer norm, peepholes or "
                     "reset-before form",
             "proj_size": "flax linen LSTM cells have no output projection (proj_size); use backend='scan' or "
                          "'naive'"})


def linen_cell_params(cell: cells.JaxCell, p: LayerParams) -> dict:
    """The linen cell's param tree from one layer/direction (as `to_flax_linen`, in jnp)."""
    return LINEN_CELLS[cell.name][0](p)


def run_layer(cell: cells.JaxCell, hidden_size: int, dir_params, x, state: tuple, lengths, *,
              cell_type: str = "OptimizedLSTMCell", unroll: int = 1):
    """One layer (both directions; `state` each (D, B, .)) -> (output, state_n each (D, B, .))."""
    import flax.linen as nn

    check_cell_type(cell, cell_type)
    check_unroll(unroll)
    T = x.shape[0]
    make_cell = LINEN_CELLS[cell.name][1]

    def make_rnn():
        return nn.RNN(make_cell(nn, hidden_size, cell_type), time_major=True, return_carry=True,
                      unroll=min(unroll, T))

    trees = [{"cell": linen_cell_params(cell, p)} for p in dir_params]
    carry = [to_carry(cell, tuple(s[d] for s in state)) for d in range(len(dir_params))]
    if len(dir_params) == 1:
        module = make_rnn()
        variables = {"params": trees[0]}
        carries, output = module.apply(variables, x, initial_carry=carry[0], seq_lengths=lengths)
        carries = [carries]
    else:
        module = nn.Bidirectional(make_rnn(), make_rnn(), time_major=True, return_carry=True)
        variables = {"params": {"forward_rnn": trees[0], "backward_rnn": trees[1]}}
        carries, output = module.apply(variables, x, initial_carry=tuple(carry), seq_lengths=lengths)
    # linen leaves the outputs past a length unspecified; PyTorch's are zero
    output = zero_past_lengths(output, lengths)
    return output, tuple(jnp.stack(parts) for parts in zip(*(from_carry(cell, c) for c in carries)))


def run_stack(cell: cells.JaxCell, spec, params, x, state: tuple, lengths, **options):
    """The stack, one `nn.RNN` / `nn.Bidirectional` per layer; see `rnnbench.jax.stack`."""
    D = spec.num_directions
    finals = []
    for layer in range(spec.num_layers):
        rows = slice(layer * D, (layer + 1) * D)
        dir_params = [layer_params(spec, params, layer, d) for d in range(D)]
        x, final = run_layer(cell, spec.hidden_size, dir_params, x, tuple(s[rows] for s in state), lengths, **options)
        finals.append(final)
    return x, tuple(jnp.concatenate(parts) for parts in zip(*finals))
