"""`flax_nnx`: Flax NNX's own cells (`OptimizedLSTMCell`, `LSTMCell`, `GRUCell`) under `nnx.RNN`.

Per layer and direction an NNX cell is built abstractly (`nnx.eval_shape`, no random
init), its `nnx.Param`s are replaced by arrays built from the canonical parameters, and
`nnx.RNN(cell, time_major=True)` runs it (a `reverse=True, keep_order=True` RNN for the
reverse direction).  The param trees follow `shared.converters.to_flax_nnx` exactly
(tests pin the two together); they are built here with `jax.numpy` so this impl stays
differentiable in the canonical params and `jit`-able (the shared converter is NumPy).

Boundary adaptations, as for `flax_linen`: the LSTM carry is `(c, h)`; the cells have
one bias per gate (`b_ih + b_hh` folded); with `seq_lengths`, `nnx.RNN` returns the
carry at the last valid step and flips each sequence's valid part for the reverse
direction, but leaves outputs past a length unspecified (zeroed here); no `proj_size`.

The NNX `GRUCell`'s recurrent dense has no bias, so it cannot hold `b_hn` (the
recurrent bias of the n gate, multiplied by the reset gate; it cannot be folded).  A GRU
whose `b_hn` is non-zero raises `shared.converters.ConversionError` -- eagerly when the
params are concrete; inside `jit`/`grad` the check runs on the device values and the
error surfaces from the computation.  A zero `b_hn` runs exactly -- forward.  Its
gradient does not exist in the NNX cell, so `jax.grad` returns zeros for that slice of
`bias_hh_*`: do not train `b_hn` through this impl.  For that reason the adapter (what
the parity matrix and the study use) reports a GRU with `bias=True` as unsupported.

Options: `cell_type` ("OptimizedLSTMCell" (default) or "LSTMCell" for an LSTM; a GRU
is always "GRUCell"), `unroll`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .driver import LayerParams, layer_from_directions, valid_steps

OPTIONS = {"cell_type": "OptimizedLSTMCell", "unroll": 1}
LSTM_CELL_TYPES = ("OptimizedLSTMCell", "LSTMCell")
_LSTM_INPUT_NAMES = {"i": "ii", "f": "if_", "g": "ig", "o": "io"}  # NNX LSTMCell attributes (`if` is a keyword)


def unavailable_reason() -> str | None:
    try:
        from flax import nnx  # noqa: F401
    except ImportError as e:
        return f"flax is not installed ({e})"
    return None


def unsupported_reason(spec, *, lengths: bool, dtype: str) -> str | None:
    if spec.proj_size:
        return "flax nnx LSTM cells have no output projection (proj_size); use impl='scan' or 'naive'"
    return None


def _biases(p: LayerParams):
    zeros = jnp.zeros((p.w_ih.shape[0],), p.w_ih.dtype)
    return (zeros if p.b_ih is None else p.b_ih), (zeros if p.b_hh is None else p.b_hh)


def nnx_cell_params(cell: str, cell_type: str, p: LayerParams) -> dict:
    """The NNX cell's param pure dict from one layer/direction (as `to_flax_nnx`, in jnp)."""
    b_ih, b_hh = _biases(p)
    if cell == "gru":
        H = p.w_hh.shape[0] // 3
        b_i = jnp.concatenate([b_ih[:2 * H] + b_hh[:2 * H], b_ih[2 * H:]])
        return {"dense_i": {"kernel": p.w_ih.T, "bias": b_i}, "dense_h": {"kernel": p.w_hh.T}}
    folded = b_ih + b_hh
    if cell_type == "OptimizedLSTMCell":
        return {"dense_i": {"kernel": p.w_ih.T}, "dense_h": {"kernel": p.w_hh.T, "bias": folded}}
    tree = {}
    for g, w_i, w_h, b in zip("ifgo", jnp.split(p.w_ih, 4), jnp.split(p.w_hh, 4), jnp.split(folded, 4)):
        tree[_LSTM_INPUT_NAMES[g]] = {"kernel": w_i.T}
        tree[f"h{g}"] = {"kernel": w_h.T, "bias": b}
    return tree


def _raise_if_b_hn(b_hn: np.ndarray, suffix: str) -> None:
    """The shared converter's verdict on a GRU's b_hn (raises ConversionError if non-zero)."""
    from shared.converters import to_flax_nnx
    from shared.spec import RNNSpec

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
    if spec.cell != "gru" or not spec.bias:
        return
    H = spec.hidden_size
    for layer, direction in spec.layers_and_directions():
        suffix = spec.suffix(layer, direction)
        b_hn = params[f"bias_hh_{suffix}"][2 * H:]
        if isinstance(b_hn, jax.core.Tracer):
            jax.debug.callback(_raise_if_b_hn, b_hn, suffix)
        else:
            _raise_if_b_hn(np.asarray(b_hn), suffix)


def make_cell(cell: str, cell_type: str, p: LayerParams):
    """An NNX cell holding `p` (built abstractly, then its params replaced)."""
    from flax import nnx

    H = p.w_hh.shape[1]
    in_features = p.w_ih.shape[1]
    cls = nnx.GRUCell if cell == "gru" else getattr(nnx, cell_type)
    abstract = nnx.eval_shape(lambda: cls(in_features, H, param_dtype=p.w_ih.dtype, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    nnx.replace_by_pure_dict(state, nnx_cell_params(cell, cell_type, p))
    return nnx.merge(graphdef, state)


def run_direction(cell, p: LayerParams, x, h0, c0, lengths, reverse: bool, *,
                  cell_type: str = "OptimizedLSTMCell", unroll: int = 1):
    """One direction over time-major x; see `driver.layer_from_directions`."""
    from flax import nnx

    if cell == "lstm" and cell_type not in LSTM_CELL_TYPES:
        raise ValueError(f"cell_type must be one of {LSTM_CELL_TYPES} for an LSTM, got {cell_type!r}")
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"unroll must be an integer >= 1, got {unroll!r}")
    T = x.shape[0]
    rnn = nnx.RNN(make_cell(cell, cell_type, p), time_major=True, return_carry=True, reverse=reverse,
                  keep_order=True, unroll=min(unroll, T), rngs=False)
    carry0 = (c0, h0) if cell == "lstm" else h0  # NNX's LSTM carry is (c, h)
    carry, output = rnn(x, initial_carry=carry0, seq_lengths=lengths)
    if lengths is not None:  # NNX leaves the outputs past a length unspecified; PyTorch's are zero
        output = jnp.where(valid_steps(T, lengths), output, jnp.zeros((), output.dtype))
    if cell == "lstm":
        c_n, h_n = carry
        return output, h_n, c_n
    return output, carry, None


run_layer = layer_from_directions(run_direction)
