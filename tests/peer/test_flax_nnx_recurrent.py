"""Flax NNX's own recurrent tests, adapted to the `flax_nnx` impl and the NNX modules
`rnnbench.jax.LSTM` / `rnnbench.jax.GRU`.

Upstream: google/flax `tests/nnx/nn/recurrent_test.py`, read at
google/flax@18f8f311c275d57f46d95e41b15aa97b454754c0 (the file's blob is the same at tag
v0.12.7, and flax/nnx/nn/recurrent.py there is byte-identical to the installed flax
0.12.8; the copy `read_file` serves, google/flax@5408c40cede2201d197444250faa2c1049ba1f9a,
has the same tests written against an older API (`.value`, `module.rngs`), so it was only
used to confirm the test list).  The test logic is re-implemented in pytest.

How a test is adapted.  Upstream builds NNX cells (`nnx.LSTMCell`, `nnx.GRUCell`,
`nnx.OptimizedLSTMCell`) with the same `nnx.Rngs` seeds used here, runs them step by step
or under `nnx.RNN`, and checks shapes, dtypes and (for the linen comparisons) values at
`atol=1e-5`.  Here the cell's parameters are converted to the canonical (PyTorch
`state_dict`) parameters with `rnnbench.converters.from_flax_nnx` (and back with
`to_flax_nnx`, which must give the cell's param state back exactly), loaded into a
`rnnbench.jax.LSTM` / `rnnbench.jax.GRU` module with `load_state_dict`, and the module -- with
`impl="flax_nnx"` (Flax's own cells under `nnx.RNN`, the project's claim (a)) and, where
the test is about module behaviour, the default `impl="scan"` (claim (b)) -- must
compute what Flax computes, at upstream's `atol=1e-5` (float32 inputs; bfloat16 and
float16 to their precision).  Upstream's shape and dtype expectations are kept.  x64 is
enabled (as in the other JAX test files) and every array gets an explicit dtype.

Where NNX's semantics differ from PyTorch's (which the modules follow), a test states it:

- carry layout: NNX's LSTM carry is `(c, h)` of shape (B, H); the modules take
  `hx=(h0, c0)` and return `(h_n, c_n)`, each (num_layers*num_directions, B, H); there is
  no `initialize_carry` -- `hx=None` is zeros, which is NNX's default `carry_init`;
- layout: `nnx.RNN` is batch-major by default, the modules are time-major unless
  `batch_first=True`;
- `seq_lengths`: `nnx.RNN` runs the cell over the padding (outputs past a length are the
  continued recurrence) and returns the carry at the last valid step; the modules'
  `lengths` zero the outputs past a length and return the state at the last valid step;
- `reverse=True` alone returns reversed outputs; PyTorch has no reverse-only layer: the
  reverse direction is the second half of a bidirectional output, in input order (NNX's
  `reverse=True, keep_order=True`, which `nnx.Bidirectional` uses);
- inputs: NNX cells accept integer inputs (promoted with the params); the modules want a
  floating x and raise `TypeError` otherwise, as `torch.nn.LSTM` does;
- `nnx.GRUCell`'s recurrent Linear has no bias, so it has no `b_hn` (PyTorch's recurrent
  bias of the n gate): a GRU from NNX converts with `b_hn = 0`, a canonical GRU with a
  non-zero `b_hn` does not convert (`ConversionError`) and the `flax_nnx` impl refuses it;
- NNX cells take `gate_fn` / `activation_fn` and recurrent dropout in a user cell; the
  modules are PyTorch's fixed sigmoid/tanh LSTM/GRU with dropout between layers.

Adapted (upstream test -> test here):
  TestLSTMCell.test_basic -> test_basic (one step: T = 1)
  TestLSTMCell.test_lstm_sequence -> test_lstm_sequence (time-major, as upstream's x)
  TestLSTMCell.test_lstm_with_different_dtypes -> test_lstm_with_different_dtypes (bfloat16)
  TestLSTMCell.test_lstm_initialize_carry -> test_lstm_initialize_carry (hx instead of
      initialize_carry(carry_init=ones); plus a c != h carry so that the order shows)
  TestLSTMCell.test_lstm_with_variable_sequence_length -> same name (lengths; int x raises)
  TestLSTMCell.test_lstm_stateful -> test_lstm_stateful (state carried across two calls)
  TestLSTMCell.test_lstm_equivalence_with_flax_linen -> same name (linen tree -> canonical
      -> NNX tree equals upstream's name mapping; flax_linen and flax_nnx impls agree)
  TestRNN.test_rnn_with_lstm_cell -> test_rnn_with_lstm_cell[LSTMCell, OptimizedLSTMCell]
  TestRNN.test_rnn_with_gru_cell -> test_rnn_with_gru_cell (+ the b_hn difference)
  TestRNN.test_rnn_time_major -> test_rnn_time_major
  TestRNN.test_rnn_reverse -> test_rnn_reverse (the bidirectional module's reverse half)
  TestRNN.test_rnn_with_seq_lengths -> test_rnn_with_seq_lengths (values matched, which
      upstream leaves as a Todo)
  TestRNN.test_rnn_with_keep_order -> test_rnn_with_keep_order
  TestRNN.test_rnn_equivalence_with_flax_linen -> same name (impl flax_linen == flax_nnx)
  TestRNN.test_rnn_with_unroll -> test_rnn_with_unroll (impl option unroll=2)
  TestRNN.test_rnn_with_different_dtypes -> test_rnn_with_different_dtypes (float16)
  TestRNN.test_rnn_with_variable_batch_size -> test_rnn_with_variable_batch_size
  TestRNN.test_recurrent_dropout -> test_dropout_rng_stream: the modules have no recurrent
      dropout; what upstream checks of NNX -- the dropout RNG stream's count advances once
      per use, so successive calls draw fresh masks -- is checked on the modules' dropout
      between layers (upstream's sizes: 32 in, 64 hidden, x (8, 10, 32)).
Added for the NNX-module contract (claim (b)): test_nnx_split_merge_and_state,
  test_nnx_jit_and_grad_with_lengths, test_nnx_vmap_ensemble.
Not adapted:
  TestLSTMCell.test_lstm_with_custom_activations -- gate_fn/activation_fn: the modules are
      PyTorch's LSTM/GRU, sigmoid/tanh fixed; the impl builds cells with NNX's defaults.
  TestRNN.test_rnn_with_custom_cell -- a user nnx.Module cell under nnx.RNN: rnnbench.jax.RNN
      takes catalogue cell names, a user cell is registered with register_cell (covered by
      tests/cross/test_own_cell.py; registering one here would change global state).
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import flax.linen as linen  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402
from flax.nnx.nn import initializers  # noqa: E402

import rnnbench.jax  # noqa: E402
from rnnbench.jax.functional import default_device  # noqa: E402
from rnnbench.core import precision  # noqa: E402
from rnnbench.converters import ConversionError, from_flax_linen, from_flax_nnx, to_flax_nnx  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402

F32 = jnp.float32
ATOL = 1e-5  # upstream's tolerance for its value comparisons


# ---- helpers ---------------------------------------------------------------------------


def cell_params(cell) -> dict:
    return nnx.to_pure_dict(nnx.state(cell, nnx.Param))


def canonical_from_nnx(spec: RNNSpec, cell_type: str, cells) -> dict:
    """Canonical params (in the cells' dtype) from one NNX cell per direction (layer 0),
    checking that converting them back gives each cell's param state exactly."""
    trees = [cell_params(c) for c in cells]
    dtype = jax.tree.leaves(trees[0])[0].dtype
    params = {}
    for d, tree in enumerate(trees):
        params.update(from_flax_nnx(spec, tree, 0, d, cell_type, dtype=dtype))
    params = {k: params[k] for k in spec.param_names()}
    for d, tree in enumerate(trees):
        back = to_flax_nnx(spec, params, 0, d, cell_type, dtype=dtype)
        assert jax.tree.structure(back) == jax.tree.structure(tree)
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, np.asarray(b)), back, tree)
    return params


def module(spec: RNNSpec, params, impl: str = "flax_nnx", **options):
    """A rnnbench.jax.LSTM / GRU with `spec`'s configuration holding `params`."""
    dtype = next(iter(params.values())).dtype
    cls = rnnbench.jax.LSTM if spec.cell == "lstm" else rnnbench.jax.GRU
    model = cls(spec.input_size, spec.hidden_size, batch_first=spec.batch_first, bidirectional=spec.bidirectional,
                rngs=nnx.Rngs(0), backend=impl, param_dtype=dtype, **options)
    model.load_state_dict(params)
    return model


def run(model, x, hx=None, lengths=None):
    """NumPy (output, h_n, c_n or None) of a module."""
    if isinstance(model, rnnbench.jax.LSTM):
        out, (h, c) = model(x, hx, lengths=lengths)
        return np.asarray(out), np.asarray(h), np.asarray(c)
    out, h = model(x, hx, lengths=lengths)
    return np.asarray(out), np.asarray(h), None


def assert_state(h_n, c_n, index, carry, atol=ATOL):
    """Module state row `index` equals an NNX carry ((c, h) for an LSTM, h for a GRU)."""
    if c_n is None:
        np.testing.assert_allclose(h_n[index], carry, atol=atol)
        return
    c, h = carry
    np.testing.assert_allclose(h_n[index], h, atol=atol)
    np.testing.assert_allclose(c_n[index], c, atol=atol)


def step(cell, carry, xs):
    """Upstream's loop: the cell over time-major xs; returns (outputs (T, B, H), carries)."""
    ys, carries = [], []
    for t in range(xs.shape[0]):
        carry, y = cell(carry, xs[t])
        ys.append(y)
        carries.append(carry)
    return jnp.stack(ys), carries


def lstm_spec(**kw):
    return RNNSpec("lstm", 3, 4, **kw)


# ---- TestLSTMCell ------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["flax_nnx", "scan"])
def test_basic(impl):
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3), F32)
    carry = cell.initialize_carry(x.shape, nnx.Rngs(0))
    new_carry, y = cell(carry, x)
    assert y.shape == (2, 4)

    spec = lstm_spec()
    model = module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), impl,
                   **({"cell_type": "LSTMCell"} if impl == "flax_nnx" else {}))
    out, h_n, c_n = run(model, x[None])  # one time step
    assert out.shape == (1, 2, 4) and h_n.shape == c_n.shape == (1, 2, 4)
    np.testing.assert_allclose(out[0], y, atol=ATOL)
    assert_state(h_n, c_n, 0, new_carry)


@pytest.mark.parametrize("impl", ["flax_nnx", "scan"])
def test_lstm_sequence(impl):
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (5, 2, 3), F32)  # seq_len, batch, feature
    carry = cell.initialize_carry(x.shape[1:], nnx.Rngs(0))
    outputs, carries = step(cell, carry, x)
    assert outputs.shape == (5, 2, 4)

    spec = lstm_spec()  # time-major: PyTorch's default layout is upstream's x here
    model = module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), impl,
                   **({"cell_type": "LSTMCell"} if impl == "flax_nnx" else {}))
    out, h_n, c_n = run(model, x)
    np.testing.assert_allclose(out, outputs, atol=ATOL)
    assert_state(h_n, c_n, 0, carries[-1])


def test_lstm_with_different_dtypes():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16,
                        rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3), dtype=jnp.bfloat16)
    carry = cell.initialize_carry(x.shape, nnx.Rngs(0))
    new_carry, y = cell(carry, x)
    assert y.dtype == jnp.bfloat16 and y.shape == (2, 4)

    spec = lstm_spec()
    params = canonical_from_nnx(spec, "LSTMCell", [cell])
    assert all(v.dtype == jnp.bfloat16 for v in params.values())
    model = module(spec, params, "flax_nnx", cell_type="LSTMCell")
    assert model.weight_ih_l0[...].dtype == jnp.bfloat16
    out, (h_n, c_n) = model(x[None])
    assert out.dtype == h_n.dtype == c_n.dtype == jnp.bfloat16 and out.shape == (1, 2, 4)
    f = lambda a: np.asarray(a, np.float32)  # noqa: E731
    np.testing.assert_allclose(f(out[0]), f(y), atol=1e-2)  # bfloat16: 8 bits of mantissa
    np.testing.assert_allclose(f(h_n[0]), f(new_carry[1]), atol=1e-2)


def test_lstm_initialize_carry():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(0))
    x_shape = (1, 3)
    carry = cell.initialize_carry(x_shape, nnx.Rngs(0), carry_init=initializers.ones)
    c, h = carry
    assert jnp.all(c == 1.0) and jnp.all(h == 1.0)
    assert c.shape == h.shape == (1, 4)

    spec = lstm_spec()
    model = module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), "scan")
    x = jax.random.normal(jax.random.key(3), (1, *x_shape), F32)  # one step
    # no initialize_carry: the initial state is PyTorch's hx = (h0, c0), (L*D, B, H) each
    new_carry, y = cell(carry, x[0])
    out, h_n, c_n = run(model, x, (h[None], c[None]))
    np.testing.assert_allclose(out[0], y, atol=ATOL)
    assert_state(h_n, c_n, 0, new_carry)
    # hx=None is zeros, NNX's default carry_init
    zero_carry = cell.initialize_carry(x_shape, nnx.Rngs(0))
    assert all(jnp.all(a == 0) for a in zero_carry)
    _, y0 = cell(zero_carry, x[0])
    np.testing.assert_allclose(run(model, x)[0][0], y0, atol=ATOL)
    # c != h: NNX's (c, h) is the modules' (h0, c0) swapped
    c1, h1 = jnp.ones((1, 4), F32), jnp.zeros((1, 4), F32)
    new_carry, y = cell((c1, h1), x[0])
    out, h_n, c_n = run(model, x, (h1[None], c1[None]))
    np.testing.assert_allclose(out[0], y, atol=ATOL)
    assert_state(h_n, c_n, 0, new_carry)
    assert not np.allclose(run(model, x, (c1[None], h1[None]))[0], out, atol=1e-3)


def test_lstm_with_variable_sequence_length():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(0))
    x = jnp.array([[[1, 2, 3], [4, 5, 6], [0, 0, 0]],  # sequence length 2
                   [[7, 8, 9], [10, 11, 12], [13, 14, 15]]])  # sequence length 3
    seq_lengths = jnp.array([2, 3])
    batch_size, max_seq_length = x.shape[0], x.shape[1]
    carry = cell.initialize_carry((batch_size, 3), nnx.Rngs(0))
    outputs, carries = step(cell, carry, jnp.swapaxes(x, 0, 1))  # NNX takes the int x as it is
    outputs = jnp.swapaxes(outputs, 0, 1)
    mask = jnp.arange(max_seq_length)[None, :] < seq_lengths[:, None]
    outputs = outputs * mask[:, :, None]  # zero out outputs beyond the lengths
    assert outputs.shape == (2, 3, 4)

    spec = lstm_spec(batch_first=True)
    model = module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), "flax_nnx", cell_type="LSTMCell")
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        model(x, lengths=seq_lengths)  # like torch.nn.LSTM, unlike NNX's cells
    out, h_n, c_n = run(model, x.astype(F32), lengths=seq_lengths)
    np.testing.assert_allclose(out, outputs, atol=ATOL)  # zero past the length, exactly what upstream masks
    np.testing.assert_array_equal(out[0, 2], 0.0)
    for b, length in enumerate([2, 3]):
        c, h = carries[length - 1]
        np.testing.assert_allclose(h_n[0, b], h[b], atol=ATOL)
        np.testing.assert_allclose(c_n[0, b], c[b], atol=ATOL)


def test_lstm_stateful():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(0))
    x1 = jnp.ones((1, 3), F32)
    x2 = jnp.ones((1, 3), F32) * 2
    carry = cell.initialize_carry(x1.shape, nnx.Rngs(0))
    carry, y1 = cell(carry, x1)
    carry, y2 = cell(carry, x2)
    assert y1.shape == y2.shape == (1, 4)

    spec = lstm_spec()
    model = module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), "scan")
    out1, state = model(x1[None])  # the state a call returns continues the sequence
    out2, (h_n, c_n) = model(x2[None], state)
    assert out1.shape == out2.shape == (1, 1, 4)
    np.testing.assert_allclose(out1[0], y1, atol=ATOL)
    np.testing.assert_allclose(out2[0], y2, atol=ATOL)
    assert_state(np.asarray(h_n), np.asarray(c_n), 0, carry)
    whole, _ = model(jnp.stack([x1, x2]))
    np.testing.assert_allclose(whole[1], out2[0], atol=ATOL)


def test_lstm_equivalence_with_flax_linen():
    in_features, hidden_features = 3, 4
    x = jax.random.normal(jax.random.PRNGKey(42), (1, in_features), F32)
    rngs_nnx = nnx.Rngs(0)
    module_nnx = nnx.LSTMCell(in_features=in_features, hidden_features=hidden_features, rngs=rngs_nnx)
    carry_nnx = module_nnx.initialize_carry(x.shape, rngs_nnx)
    module_linen = linen.LSTMCell(features=hidden_features)
    carry_linen = module_linen.initialize_carry(jax.random.PRNGKey(0), x.shape)
    params_linen = module_linen.init(jax.random.PRNGKey(1), carry_linen, x)["params"]

    # upstream copies linen's params into the NNX cell by name (`if` -> `if_`); here they go
    # through the canonical params: linen tree -> canonical -> NNX tree is that same mapping
    spec = lstm_spec()
    params = from_flax_linen(spec, params_linen, 0, 0, "LSTMCell", dtype=np.float32)
    tree = to_flax_nnx(spec, params, 0, 0, "LSTMCell", dtype=np.float32)
    mapped = {("if_" if k == "if" else k): v for k, v in params_linen.items()}
    assert jax.tree.structure(tree) == jax.tree.structure(mapped)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, np.asarray(b)), tree, mapped)
    state = nnx.state(module_nnx, nnx.Param)
    nnx.replace_by_pure_dict(state, tree)
    nnx.update(module_nnx, state)

    new_carry_nnx, y_nnx = module_nnx(carry_nnx, x)
    new_carry_linen, y_linen = module_linen.apply({"params": params_linen}, carry_linen, x)
    np.testing.assert_allclose(y_nnx, y_linen, atol=ATOL)
    for c_nnx, c_linen in zip(new_carry_nnx, new_carry_linen):
        np.testing.assert_allclose(c_nnx, c_linen, atol=ATOL)
    # and the project's two Flax impls, on the canonical params
    for impl in ("flax_linen", "flax_nnx"):
        out, (h_n, c_n) = rnnbench.jax.lstm(params, x[None], backend=impl, cell_type="LSTMCell")
        np.testing.assert_allclose(out[0], y_linen, atol=ATOL)
        assert_state(np.asarray(h_n), np.asarray(c_n), 0, new_carry_linen)


# ---- TestRNN -----------------------------------------------------------------------------


@pytest.mark.parametrize("cell_type", ["LSTMCell", "OptimizedLSTMCell"])
def test_rnn_with_lstm_cell(cell_type):
    cell = getattr(nnx, cell_type)(in_features=3, hidden_features=4, rngs=nnx.Rngs(0))
    rnn = nnx.RNN(cell)
    x = jnp.ones((2, 5, 3), F32)  # batch_size=2, seq_length=5, features=3
    carry = cell.initialize_carry((2, 3), nnx.Rngs(0))
    outputs = rnn(x, initial_carry=carry)
    assert outputs.shape == (2, 5, 4)

    spec = lstm_spec(batch_first=True)  # nnx.RNN's default layout
    params = canonical_from_nnx(spec, cell_type, [cell])
    for model in (module(spec, params, "flax_nnx", cell_type=cell_type), module(spec, params, "scan")):
        out, _, _ = run(model, x)
        assert out.shape == (2, 5, 4)
        np.testing.assert_allclose(out, outputs, atol=ATOL)


def test_rnn_with_gru_cell():
    cell = nnx.GRUCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(1))
    rnn = nnx.RNN(cell, return_carry=True)
    x = jnp.ones((2, 5, 3), F32)
    carry = cell.initialize_carry((2, 3), nnx.Rngs(1))
    final, outputs = rnn(x, initial_carry=carry)
    assert outputs.shape == (2, 5, 4)

    spec = RNNSpec("gru", 3, 4, batch_first=True)
    params = canonical_from_nnx(spec, "GRUCell", [cell])
    np.testing.assert_array_equal(params["bias_hh_l0"], 0.0)  # NNX's GRUCell has no recurrent bias: b_hn = 0
    for model in (module(spec, params, "flax_nnx"), module(spec, params, "scan")):
        out, h_n, _ = run(model, x)
        assert out.shape == (2, 5, 4) and h_n.shape == (1, 2, 4)
        np.testing.assert_allclose(out, outputs, atol=ATOL)
        assert_state(h_n, None, 0, final)

    # PyTorch's GRU has b_hn (inside r * (W_hn h + b_hn)); NNX's cannot hold a non-zero one
    model = rnnbench.jax.GRU(3, 4, batch_first=True, rngs=nnx.Rngs(0), backend="flax_nnx")
    assert np.any(model.state_dict()["bias_hh_l0"][8:] != 0)
    with pytest.raises(ConversionError, match=r"b_hn"):
        to_flax_nnx(spec, model.state_dict(), 0, 0, "GRUCell")
    with pytest.raises(ConversionError, match=r"bias_hh_l0\[8:12\].*b_hn"):
        model(x)


def test_rnn_time_major():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(2))
    rnn = nnx.RNN(cell, time_major=True)
    x = jnp.ones((5, 2, 3), F32)  # seq_length=5, batch_size=2, features=3
    carry = cell.initialize_carry(x.shape[1:2] + x.shape[2:], nnx.Rngs(2))
    outputs = rnn(x, initial_carry=carry)
    assert outputs.shape == (5, 2, 4)

    spec = lstm_spec()  # batch_first=False, PyTorch's default, is NNX's time_major=True
    out, _, _ = run(module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), "flax_nnx", cell_type="LSTMCell"), x)
    assert out.shape == (5, 2, 4)
    np.testing.assert_allclose(out, outputs, atol=ATOL)


def _arange_input():
    """Upstream's distinct-valued (integer) input, (2, 5, 3)."""
    x = jnp.tile(jnp.arange(5), (2, 1)).reshape(2, 5, 1)
    return jnp.concatenate([x, x, x], axis=-1)


def _bidirectional_with(cell, cell_type="LSTMCell"):
    """A bidirectional batch-first module whose two directions both hold `cell`'s params."""
    spec = lstm_spec(batch_first=True, bidirectional=True)
    return module(spec, canonical_from_nnx(spec, cell_type, [cell, cell]), "flax_nnx", cell_type=cell_type)


def test_rnn_reverse():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(3))
    rnn = nnx.RNN(cell, reverse=True, return_carry=True)
    x = _arange_input()
    carry, outputs = rnn(x)
    outputs_reversed = outputs[:, ::-1, :]
    assert outputs.shape == outputs_reversed.shape == (2, 5, 4)

    out, h_n, c_n = run(_bidirectional_with(cell), x.astype(F32))
    # reverse=True returns the outputs in reversed order; PyTorch's reverse direction in input order
    np.testing.assert_allclose(out[..., 4:], outputs_reversed, atol=ATOL)
    assert_state(h_n, c_n, 1, carry)
    reference, _ = step(cell, cell.initialize_carry((2, 3), nnx.Rngs(3)), jnp.swapaxes(x[:, ::-1], 0, 1))
    np.testing.assert_allclose(outputs, jnp.swapaxes(reference, 0, 1), atol=ATOL)


def test_rnn_with_seq_lengths():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(4))
    rnn = nnx.RNN(cell, return_carry=True)
    x = jnp.array([[[1, 1, 1], [2, 2, 2], [3, 3, 3], [0, 0, 0], [0, 0, 0]],  # sequence length 3
                   [[4, 4, 4], [5, 5, 5], [6, 6, 6], [7, 7, 7], [8, 8, 8]]])  # sequence length 5
    seq_lengths = jnp.array([3, 5])
    carry = cell.initialize_carry((2, 3), nnx.Rngs(4))
    final_carry, outputs = rnn(x, initial_carry=carry, seq_lengths=seq_lengths)
    assert outputs.shape == (2, 5, 4)
    assert final_carry[0].shape == (2, 4)  # c
    assert final_carry[1].shape == (2, 4)  # h

    # upstream's Todo, "matching the outputs with the expected values": NNX runs the cell
    # over the padding too, and returns the carry at the last valid step
    steps, carries = step(cell, carry, jnp.swapaxes(x, 0, 1))
    np.testing.assert_allclose(outputs, jnp.swapaxes(steps, 0, 1), atol=ATOL)
    for b, length in enumerate([3, 5]):
        jax.tree.map(lambda a, f: np.testing.assert_allclose(a[b], f[b], atol=ATOL), carries[length - 1], final_carry)

    spec = lstm_spec(batch_first=True)
    params = canonical_from_nnx(spec, "LSTMCell", [cell])
    for model in (module(spec, params, "flax_nnx", cell_type="LSTMCell"), module(spec, params, "scan")):
        out, h_n, c_n = run(model, x.astype(F32), lengths=seq_lengths)
        assert out.shape == (2, 5, 4) and h_n.shape == c_n.shape == (1, 2, 4)
        np.testing.assert_allclose(out[0, :3], outputs[0, :3], atol=ATOL)
        np.testing.assert_allclose(out[1], outputs[1], atol=ATOL)
        np.testing.assert_array_equal(out[0, 3:], 0.0)  # PyTorch: zero past the length ...
        assert not np.allclose(outputs[0, 3:], 0.0)  # ... NNX: the recurrence over the padding
        assert_state(h_n, c_n, 0, final_carry)


def test_rnn_with_keep_order():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(5))
    rnn = nnx.RNN(cell, reverse=True, keep_order=True, return_carry=True)
    x = _arange_input()
    carry = cell.initialize_carry((2, 3), nnx.Rngs(5))
    final, outputs = rnn(x, initial_carry=carry)
    assert outputs.shape == (2, 5, 4)

    out, h_n, c_n = run(_bidirectional_with(cell), x.astype(F32))
    np.testing.assert_allclose(out[..., 4:], outputs, atol=ATOL)  # keep_order=True is PyTorch's layout
    assert_state(h_n, c_n, 1, final)
    # and with lengths, as nnx.Bidirectional runs its backward RNN: only the valid part is reversed
    lengths = jnp.array([3, 5])
    final, outputs = rnn(x, initial_carry=carry, seq_lengths=lengths)
    out, h_n, c_n = run(_bidirectional_with(cell), x.astype(F32), lengths=lengths)
    np.testing.assert_allclose(out[0, :3, 4:], outputs[0, :3], atol=ATOL)
    np.testing.assert_allclose(out[1, :, 4:], outputs[1], atol=ATOL)
    np.testing.assert_array_equal(out[0, 3:], 0.0)
    assert_state(h_n, c_n, 1, final)
    reference, _ = step(cell, cell.initialize_carry((1, 3), nnx.Rngs(5)), jnp.swapaxes(x[:1, 2::-1], 0, 1))
    np.testing.assert_allclose(out[0, :3, 4:], reference[::-1, 0], atol=ATOL)


def test_rnn_equivalence_with_flax_linen():
    in_features, hidden_features, seq_length, batch_size = 3, 4, 5, 2
    x = jax.random.normal(jax.random.PRNGKey(42), (batch_size, seq_length, in_features), F32)
    rngs_nnx = nnx.Rngs(0)
    cell_nnx = nnx.LSTMCell(in_features=in_features, hidden_features=hidden_features, rngs=rngs_nnx)
    rnn_nnx = nnx.RNN(cell_nnx)
    cell_linen = linen.LSTMCell(features=hidden_features)
    rnn_linen = linen.RNN(cell_linen)
    carry_linen = cell_linen.initialize_carry(jax.random.PRNGKey(0), x[:, 0].shape)
    variables_linen = rnn_linen.init(jax.random.PRNGKey(1), x)

    spec = lstm_spec(batch_first=True)
    params = from_flax_linen(spec, variables_linen["params"]["cell"], 0, 0, "LSTMCell", dtype=np.float32)
    state = nnx.state(cell_nnx, nnx.Param)  # upstream's copy, through the canonical params
    nnx.replace_by_pure_dict(state, to_flax_nnx(spec, params, 0, 0, "LSTMCell", dtype=np.float32))
    nnx.update(cell_nnx, state)
    carry_nnx = cell_nnx.initialize_carry((batch_size, in_features), rngs_nnx)
    outputs_nnx = rnn_nnx(x, initial_carry=carry_nnx)
    outputs_linen = rnn_linen.apply(variables_linen, x, initial_carry=carry_linen)
    np.testing.assert_allclose(outputs_nnx, outputs_linen, atol=ATOL)

    for impl in ("flax_linen", "flax_nnx"):
        out, _, _ = run(module(spec, params, impl, cell_type="LSTMCell"), x)
        np.testing.assert_allclose(out, outputs_linen, atol=ATOL)


def test_rnn_with_unroll():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(6))
    rnn = nnx.RNN(cell, unroll=2)
    x = jnp.ones((2, 6, 3), F32)
    carry = cell.initialize_carry((2, 3), nnx.Rngs(6))
    outputs = rnn(x, initial_carry=carry)
    assert outputs.shape == (2, 6, 4)

    spec = lstm_spec(batch_first=True)
    model = module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), "flax_nnx", cell_type="LSTMCell", unroll=2)
    out, _, _ = run(model, x)
    assert out.shape == (2, 6, 4)
    np.testing.assert_allclose(out, outputs, atol=ATOL)


@pytest.mark.parametrize("impl", ["flax_nnx", "scan"])
def test_rnn_with_different_dtypes(impl):
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, dtype=jnp.float16, param_dtype=jnp.float16,
                        rngs=nnx.Rngs(8))
    rnn = nnx.RNN(cell)
    x = jnp.ones((2, 5, 3), dtype=jnp.float16)
    carry = cell.initialize_carry((2, 3), nnx.Rngs(8))
    outputs = rnn(x, initial_carry=carry)
    assert outputs.dtype == jnp.float16 and outputs.shape == (2, 5, 4)

    spec = lstm_spec(batch_first=True)
    params = canonical_from_nnx(spec, "LSTMCell", [cell])
    options = {"cell_type": "LSTMCell"} if impl == "flax_nnx" else {}
    if precision.device_reason("float16", default_device()):
        # rnnbench refuses float16 where the device has no float16 arithmetic (docs/precision.md)
        with pytest.raises(rnnbench.jax.UnsupportedConfigError, match=f"jax.{impl} cannot run float16 on cpu"):
            module(spec, params, impl, **options)
        return
    model = module(spec, params, impl, **options)
    out, (h_n, c_n) = model(x)
    assert out.dtype == h_n.dtype == c_n.dtype == jnp.float16 and out.shape == (2, 5, 4)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(outputs, np.float32), atol=2e-3)  # float16


def test_rnn_with_variable_batch_size():
    cell = nnx.LSTMCell(in_features=3, hidden_features=4, rngs=nnx.Rngs(9))
    rnn = nnx.RNN(cell)
    spec = lstm_spec(batch_first=True)
    model = module(spec, canonical_from_nnx(spec, "LSTMCell", [cell]), "scan")
    x5 = jax.random.normal(jax.random.key(9), (5, 5, 3), F32)  # distinct rows: batch entries stay apart
    for batch_size in [1, 2, 5]:
        x = jnp.ones((batch_size, 5, 3), F32)
        carry = cell.initialize_carry((batch_size, 3), nnx.Rngs(9))
        outputs = rnn(x, initial_carry=carry)
        assert outputs.shape == (batch_size, 5, 4)
        out, _, _ = run(model, x)  # one module, any batch size
        assert out.shape == (batch_size, 5, 4)
        np.testing.assert_allclose(out, outputs, atol=ATOL)
        np.testing.assert_allclose(run(model, x5[:batch_size])[0], run(model, x5)[0][:batch_size], atol=ATOL)


def test_dropout_rng_stream():
    model = rnnbench.jax.LSTM(32, 64, num_layers=2, dropout=0.2, batch_first=True, rngs=nnx.Rngs(0, dropout=1))
    x = jnp.ones((8, 10, 32), F32)
    forward = nnx.jit(lambda model, x: model(x)[0])  # the RNG state flows out of nnx.jit too
    assert model.dropout.rngs.count[...] == 0
    y1 = forward(model, x)
    assert y1.shape == (8, 10, 64)
    assert model.dropout.rngs.count[...] == 1  # one layer boundary, one key
    y2 = forward(model, x)
    assert model.dropout.rngs.count[...] == 2
    assert not np.allclose(y1, y2)  # a fresh mask per call
    model.eval()
    e1, e2 = model(x)[0], model(x)[0]
    assert model.dropout.rngs.count[...] == 2  # no dropout, no key drawn
    np.testing.assert_array_equal(e1, e2)


# ---- the NNX-module contract ----------------------------------------------------------


def test_nnx_split_merge_and_state():
    model = rnnbench.jax.LSTM(3, 4, num_layers=2, bidirectional=True, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (5, 2, 3), F32)
    out, _ = model(x)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    names = set(nnx.to_pure_dict(params))
    assert names == set(model.state_dict()) == set(model.spec.param_names())  # PyTorch's names
    assert not jax.tree.leaves(rest)
    n_params = sum(int(np.prod(s)) for s in model.spec.param_shapes().values())
    assert sum(a.size for a in jax.tree.leaves(params)) == n_params
    np.testing.assert_array_equal(nnx.merge(graphdef, params, rest)(x)[0], out)
    # a changed state flows into the module (and its state_dict) through nnx.update
    changed = jax.tree.map(lambda a: a * 0.5, nnx.state(model, nnx.Param))
    nnx.update(model, changed)
    np.testing.assert_array_equal(model.state_dict()["weight_hh_l1_reverse"],
                                  np.asarray(changed["weight_hh_l1_reverse"][...]))
    assert not np.allclose(model(x)[0], out)


@pytest.mark.parametrize("impl", ["scan", "flax_nnx"])
def test_nnx_jit_and_grad_with_lengths(impl):
    spec = lstm_spec(batch_first=True, bidirectional=True)
    model = rnnbench.jax.LSTM(3, 4, batch_first=True, bidirectional=True, rngs=nnx.Rngs(1), backend=impl)
    x = jax.random.normal(jax.random.key(1), (2, 5, 3), F32)
    lengths = jnp.array([5, 3])

    @nnx.jit
    def loss_and_grad(model, x, lengths):
        def loss_fn(model):
            out, (h, c) = model(x, lengths=lengths)
            return jnp.sum(out ** 2) + jnp.sum(h * c)
        return nnx.value_and_grad(loss_fn)(model)

    loss, grads = loss_and_grad(model, x, lengths)

    def functional(params):  # the same loss on the canonical params, jax.grad
        out, (h, c) = rnnbench.jax.lstm(params, x, lengths=lengths, batch_first=True, bidirectional=True, backend=impl)
        return jnp.sum(out ** 2) + jnp.sum(h * c)

    want_loss, want = jax.value_and_grad(functional)(model.canonical_params())
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    got = nnx.to_pure_dict(grads)
    assert set(got) == set(spec.param_names())
    for name in spec.param_names():
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6)


def test_nnx_vmap_ensemble():
    @nnx.split_rngs(splits=3)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(rngs):
        return rnnbench.jax.GRU(3, 4, rngs=rngs)

    ensemble = create(nnx.Rngs(0))
    assert nnx.state(ensemble, nnx.Param)["weight_ih_l0"][...].shape == (3, 12, 3)

    @nnx.vmap(in_axes=(0, None))
    def forward(model, x):
        return model(x)[0]

    x = jax.random.normal(jax.random.key(2), (5, 2, 3), F32)
    ys = forward(ensemble, x)
    assert ys.shape == (3, 5, 2, 4)
    graphdef, state = nnx.split(ensemble)
    for i in range(3):
        member = nnx.merge(graphdef, jax.tree.map(lambda a: a[i], state))
        np.testing.assert_allclose(ys[i], member(x)[0], atol=1e-6)
    assert not np.allclose(ys[0], ys[1])  # split rngs: different initialisations
