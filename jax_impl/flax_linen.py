"""`flax_linen`: `flax.linen.RNN` over `OptimizedLSTMCell` / `LSTMCell` / `GRUCell`.

One layer is `nn.RNN(cell, time_major=True)`, or `nn.Bidirectional(fwd, bwd)` for two
directions, applied to variables built from the canonical parameters.  The variables
follow `shared.converters.to_flax_linen` exactly (tests pin the two together); they are
built here with `jax.numpy` because the shared converter is NumPy and cannot be traced,
and this impl must stay differentiable in the canonical params and `jit`-able.

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

from .driver import LayerParams, valid_steps

OPTIONS = {"cell_type": "OptimizedLSTMCell", "unroll": 1}
LSTM_CELL_TYPES = ("OptimizedLSTMCell", "LSTMCell")


def unavailable_reason() -> str | None:
    try:
        import flax.linen  # noqa: F401
    except ImportError as e:
        return f"flax is not installed ({e})"
    return None


def unsupported_reason(spec, *, lengths: bool, dtype: str) -> str | None:
    if spec.proj_size:
        return "flax linen LSTM cells have no output projection (proj_size); use impl='scan' or 'naive'"
    return None


def linen_cell_params(cell: str, p: LayerParams) -> dict:
    """The linen cell's param tree from one layer/direction (as `to_flax_linen`, in jnp)."""
    G4 = p.w_ih.shape[0]
    zeros = jnp.zeros((G4,), p.w_ih.dtype)
    b_ih = zeros if p.b_ih is None else p.b_ih
    b_hh = zeros if p.b_hh is None else p.b_hh
    gates = "ifgo" if cell == "lstm" else "rzn"
    w_ih = dict(zip(gates, jnp.split(p.w_ih, len(gates))))
    w_hh = dict(zip(gates, jnp.split(p.w_hh, len(gates))))
    bi = dict(zip(gates, jnp.split(b_ih, len(gates))))
    bh = dict(zip(gates, jnp.split(b_hh, len(gates))))
    tree = {}
    if cell == "lstm":
        for g in gates:
            tree[f"i{g}"] = {"kernel": w_ih[g].T}
            tree[f"h{g}"] = {"kernel": w_hh[g].T, "bias": bi[g] + bh[g]}
        return tree
    for g in "rz":
        tree[f"i{g}"] = {"kernel": w_ih[g].T, "bias": bi[g] + bh[g]}
        tree[f"h{g}"] = {"kernel": w_hh[g].T}
    tree["in"] = {"kernel": w_ih["n"].T, "bias": bi["n"]}
    tree["hn"] = {"kernel": w_hh["n"].T, "bias": bh["n"]}
    return tree


def _check_options(cell: str, cell_type: str, unroll: int) -> None:
    if cell == "lstm" and cell_type not in LSTM_CELL_TYPES:
        raise ValueError(f"cell_type must be one of {LSTM_CELL_TYPES} for an LSTM, got {cell_type!r}")
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"unroll must be an integer >= 1, got {unroll!r}")


def run_layer(spec, dir_params, x, h0, c0, lengths, *, cell_type: str = "OptimizedLSTMCell", unroll: int = 1):
    """One layer (both directions) with linen; see `jax_impl.driver` for the contract."""
    import flax.linen as nn

    cell = spec.cell
    _check_options(cell, cell_type, unroll)
    H = spec.hidden_size
    T = x.shape[0]

    def make_rnn():
        if cell == "lstm":
            linen_cell = getattr(nn, cell_type)(H)
        else:
            linen_cell = nn.GRUCell(H)
        return nn.RNN(linen_cell, time_major=True, return_carry=True, unroll=min(unroll, T))

    def carry(d):  # PyTorch (h, c) -> linen (c, h)
        return (c0[d], h0[d]) if cell == "lstm" else h0[d]

    trees = [{"cell": linen_cell_params(cell, p)} for p in dir_params]
    if len(dir_params) == 1:
        module = make_rnn()
        variables = {"params": trees[0]}
        carries, output = module.apply(variables, x, initial_carry=carry(0), seq_lengths=lengths)
        carries = [carries]
    else:
        module = nn.Bidirectional(make_rnn(), make_rnn(), time_major=True, return_carry=True)
        variables = {"params": {"forward_rnn": trees[0], "backward_rnn": trees[1]}}
        carries, output = module.apply(variables, x, initial_carry=(carry(0), carry(1)), seq_lengths=lengths)
    if lengths is not None:  # linen leaves the outputs past a length unspecified; PyTorch's are zero
        output = jnp.where(valid_steps(T, lengths), output, jnp.zeros((), output.dtype))
    if cell == "lstm":
        h_n = jnp.stack([h for (c, h) in carries])
        c_n = jnp.stack([c for (c, h) in carries])
        return output, h_n, c_n
    return output, jnp.stack(carries), None
