"""`flax_nnx`: Flax NNX's own cells (`OptimizedLSTMCell`, `LSTMCell`, `GRUCell`) under `nnx.RNN`.

Per layer and direction an NNX cell is built abstractly (`nnx.eval_shape`, no random
init), its `nnx.Param`s are replaced by arrays built from the canonical parameters, and
`nnx.RNN(cell, time_major=True)` runs it with Flax's own loop (a `reverse=True,
keep_order=True` RNN for the reverse direction).  The param trees follow
`rnnbench.converters.to_flax_nnx` exactly (tests pin the two together); they are built
here with `jax.numpy` so this backend stays differentiable in the canonical params and
`jit`-able (the shared converter is NumPy).

Boundary adaptations, as for `flax_linen`: the LSTM carry is `(c, h)`; the cells have
one bias per gate (`b_ih + b_hh` folded); with `seq_lengths`, `nnx.RNN` returns the
carry at the last valid step and flips each sequence's valid part for the reverse
direction, but leaves outputs past a length unspecified (zeroed here); no `proj_size`.

The NNX `GRUCell`'s recurrent dense has no bias, so it cannot hold `b_hn` (the
recurrent bias of the n gate, multiplied by the reset gate; it cannot be folded).  A GRU
whose `b_hn` is non-zero raises `rnnbench.converters.ConversionError` -- eagerly when the
params are concrete; inside `jit`/`grad` the check runs on the device values and the
error surfaces from the computation.  A zero `b_hn` runs exactly -- forward.  Its
gradient does not exist in the NNX cell, so `jax.grad` returns zeros for that slice of
`bias_hh_*`: do not train `b_hn` through this backend.  For that reason the adapter (what
the parity matrix and the study use) reports a GRU with `bias=True` as unsupported
(`gradient_reason`).

Options: `cell_type` ("OptimizedLSTMCell" (default) or "LSTMCell" for an LSTM; a GRU
is always "GRUCell"), `unroll`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnbench.core.capabilities import Capabilities
from rnnbench.core.catalogue import get_cell

from rnnbench.core.params import LayerParams

from .. import cells
from ._common import (
    LSTM_CELL_TYPES, biases_or_zeros, check_cell_type, check_unroll, from_carry, to_carry, zero_past_lengths)

OPTIONS = {"cell_type": "OptimizedLSTMCell", "unroll": 1}
_LSTM_INPUT_NAMES = {"i": "ii", "f": "if_", "g": "ig", "o": "io"}  # NNX LSTMCell attributes (`if` is a keyword)
B_HN = ("flax nnx GRUCell has no b_hn (the n gate's recurrent bias, scaled by the reset gate): a canonical GRU "
        "with biases runs only when b_hn = 0, and even then has no b_hn gradient")
__all__ = ["OPTIONS", "LSTM_CELL_TYPES", "CAPABILITIES", "NNX_CELLS", "unavailable_reason", "gradient_reason",
           "nnx_cell_params", "validate", "make_cell", "run_direction"]


def unavailable_reason(device: str | None = None) -> str | None:
    try:
        from flax import nnx  # noqa: F401
    except ImportError as e:
        return f"flax is not installed ({e})"
    return None


def lstm_params(cell_type: str, p: LayerParams) -> dict:
    """An NNX LSTM cell's param pure dict (biases folded into the recurrent dense)."""
    b_ih, b_hh = biases_or_zeros(p)
    folded = b_ih + b_hh
    if cell_type == "OptimizedLSTMCell":
        return {"dense_i": {"kernel": p.w_ih.T}, "dense_h": {"kernel": p.w_hh.T, "bias": folded}}
    tree = {}
    for g, w_i, w_h, b in zip("ifgo", jnp.split(p.w_ih, 4), jnp.split(p.w_hh, 4), jnp.split(folded, 4)):
        tree[_LSTM_INPUT_NAMES[g]] = {"kernel": w_i.T}
        tree[f"h{g}"] = {"kernel": w_h.T, "bias": b}
    return tree


def gru_params(cell_type: str, p: LayerParams) -> dict:
    """NNX GRUCell's param pure dict (b_ih + [b_hr, b_hz, 0] on the input dense; no b_hn)."""
    b_ih, b_hh = biases_or_zeros(p)
    H = p.w_hh.shape[0] // 3
    b_i = jnp.concatenate([b_ih[:2 * H] + b_hh[:2 * H], b_ih[2 * H:]])
    return {"dense_i": {"kernel": p.w_ih.T, "bias": b_i}, "dense_h": {"kernel": p.w_hh.T}}


# cell -> (param pure dict of one layer/direction, the NNX cell class: cls(nnx, cell_type))
NNX_CELLS = {
    "lstm": (lstm_params, lambda nnx, cell_type: getattr(nnx, cell_type)),
    "gru": (gru_params, lambda nnx, cell_type: nnx.GRUCell),
}

CAPABILITIES = Capabilities(
    cells=tuple(NNX_CELLS), proj_size=False,
    why_not={"cell": "Flax NNX's built-in LSTMCell/GRUCell have no layer norm, peepholes or reset-before form",
             "proj_size": "flax nnx LSTM cells have no output projection (proj_size); use backend='scan' or 'naive'",
             "gradient": B_HN})


def _without_b_hn(spec) -> bool:
    """Whether the spec's Flax cell lacks a parameter the canonical one has: a GRU's b_hn."""
    return not get_cell(spec.cell).has_cell_state and spec.bias


def gradient_reason(spec) -> str | None:
    """A GRU with biases: runs (when b_hn = 0) but has no b_hn gradient."""
    return CAPABILITIES.why_not["gradient"] if _without_b_hn(spec) else None


def nnx_cell_params(cell: cells.JaxCell, cell_type: str, p: LayerParams) -> dict:
    """The NNX cell's param pure dict from one layer/direction (as `to_flax_nnx`, in jnp)."""
    return NNX_CELLS[cell.name][0](cell_type, p)


def _raise_if_b_hn(b_hn: np.ndarray, suffix: str) -> None:
    """The shared converter's verdict on a GRU's b_hn (raises ConversionError if non-zero)."""
    from rnnbench.converters import to_flax_nnx
    from rnnbench.core.spec import RNNSpec

    H = b_hn.shape[0]
    spec = RNNSpec("gru", 1, H)
    zeros = lambda *s: np.zeros(s)  # noqa: E731
    params = {"weight_ih_l0": zeros(3 * H, 1), "weight_hh_l0": zeros(3 * H, H), "bias_ih_l0": zeros(3 * H),
              "bias_hh_l0": np.concatenate([zeros(2 * H), np.asarray(b_hn, dtype=np.float64)])}
    try:
        to_flax_nnx(spec, params, 0, 0, "GRUCell")
    except ValueError as e:
        raise type(e)(str(e).replace("bias_hh_l0", f"bias_hh_{suffix}")) from None


def validate(spec, params) -> None:
    """Refuse a GRU with non-zero b_hn: eagerly if concrete, else at run time on device."""
    if not _without_b_hn(spec):
        return
    H = spec.hidden_size
    for layer, direction in spec.layers_and_directions():
        suffix = spec.suffix(layer, direction)
        b_hn = params[f"bias_hh_{suffix}"][2 * H:]
        if isinstance(b_hn, jax.core.Tracer):
            jax.debug.callback(_raise_if_b_hn, b_hn, suffix)
        else:
            _raise_if_b_hn(np.asarray(b_hn), suffix)


def make_cell(cell: cells.JaxCell, cell_type: str, p: LayerParams):
    """An NNX cell holding `p` (built abstractly, then its params replaced)."""
    from flax import nnx

    H = p.w_hh.shape[1]
    in_features = p.w_ih.shape[1]
    cls = NNX_CELLS[cell.name][1](nnx, cell_type)
    abstract = nnx.eval_shape(lambda: cls(in_features, H, param_dtype=p.w_ih.dtype, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    nnx.replace_by_pure_dict(state, nnx_cell_params(cell, cell_type, p))
    return nnx.merge(graphdef, state)


def run_direction(cell: cells.JaxCell, p: LayerParams, x, state: tuple, lengths, *, reverse: bool,
                  cell_type: str = "OptimizedLSTMCell", unroll: int = 1):
    """One direction over time-major x; see `rnnbench.jax.stack`."""
    from flax import nnx

    check_cell_type(cell, cell_type)
    check_unroll(unroll)
    T = x.shape[0]
    rnn = nnx.RNN(make_cell(cell, cell_type, p), time_major=True, return_carry=True, reverse=reverse,
                  keep_order=True, unroll=min(unroll, T), rngs=False)
    carry, output = rnn(x, initial_carry=to_carry(cell, state), seq_lengths=lengths)
    # NNX leaves the outputs past a length unspecified; PyTorch's are zero
    return zero_past_lengths(output, lengths), from_carry(cell, carry)
