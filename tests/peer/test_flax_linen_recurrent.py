"""Flax linen's own recurrent tests, adapted to the `flax_linen` impl (rnnbench.jax.lstm/gru).

Upstream: google/flax `tests/linen/linen_recurrent_test.py`, read at
google/flax@18f8f311c275d57f46d95e41b15aa97b454754c0 (the file's blob is the same at tag
v0.12.7, and flax/linen/recurrent.py there is byte-identical to the installed flax 0.12.8;
the copy `read_file` serves, google/flax@a4a89ae485aa5737f8dd1ea08880ed181be7f27b, is an
older flax-0.7-era version -- `nn.RNN(cell, channels_out)`, `segmentation_mask`, no
`test_basic_seq_lengths` -- superseded by the one above).  The test logic is
re-implemented in pytest.

How a test is adapted.  Upstream builds Flax modules, initialises them and checks shapes
and that `nn.RNN` computes what stepping `cell.apply` by hand computes.  Here the same
modules are built with the same sizes, inputs and PRNG keys; their variables are converted
to the canonical (PyTorch `state_dict`) parameters with `rnnbench.converters.from_flax_linen`
(and back with `to_flax_linen`, which must give Flax's tree back exactly); then
`rnnbench.jax.lstm/gru(..., backend="flax_linen")` must compute what Flax computes, with the
tolerance upstream asserts (`rtol=1e-5`, `1e-6` for the single-batch test, `1e-4` for the
`jax.lax.scan` one); shape tests keep upstream's shape expectations and add that value
comparison at `rtol=1e-5`.  Flax initialises biases to zero, which would hide a bias
folding mistake, so `test_numerical_equivalence` also runs canonical parameters with
non-zero `b_ih`/`b_hh` (and a non-zero GRU `b_hn`) converted to Flax, and checks the
`scan` impl (the project's PyTorch-semantics reference) agrees too.  Upstream's tests use
`LSTMCell` only; the core ones are extended to `OptimizedLSTMCell` (this impl's default
cell) and `GRUCell`.  Inputs are float32 as upstream; x64 is enabled (as in the other JAX
test files, so this file behaves the same alone and in the full run) and every array is
given an explicit dtype.

Where linen's semantics differ from PyTorch's (which rnnbench.jax follows), a test states the
difference and checks the impl adapts at the boundary:

- carry layout: linen's LSTM carry is `(c, h)` per direction, shape (B, H); rnnbench.jax takes
  `hx=(h0, c0)` and returns `(h_n, c_n)`, each (num_layers*num_directions, B, H);
- layout: linen's default is batch-major (`time_major=False`), PyTorch's time-major
  (`batch_first=False`); and linen's RNN takes any number of leading batch dims, rnnbench.jax
  exactly one (a 4-D x raises; `jax.vmap` gives the extra batch dims);
- `seq_lengths`: linen keeps running the cell over the padding, so its outputs past a
  length are the continued recurrence (not masked); its carry (with `return_carry`) is
  the one at the last valid step.  PyTorch/jax_impl: outputs past a length are zero, the
  state is the one at the last valid step;
- `reverse=True` without `keep_order` returns the outputs in reversed time order; PyTorch's
  reverse direction (bidirectional only) returns them in input order (`keep_order=True`);
  with `seq_lengths` linen reverses only each sequence's valid part (`flip_sequences`),
  exactly PyTorch's packed-sequence semantics for the reverse direction;
- `nn.Bidirectional` has a `merge_fn` (default: concatenate forward, backward); PyTorch's
  output is always the concatenation `[forward, backward]`;
- a sequence length of 0: linen silently returns the carry at index -1 (after the whole
  padded sequence); PyTorch refuses it, and rnnbench.jax raises `ValueError`.

Adapted (upstream test -> test here):
  RNNTest.test_rnn_basic_forward -> test_rnn_basic_forward[LSTMCell, OptimizedLSTMCell, GRUCell]
  RNNTest.test_rnn_multiple_batch_dims -> test_rnn_multiple_batch_dims (vmap; 4-D x raises)
  RNNTest.test_rnn_unroll -> test_rnn_unroll (impl option unroll=10)
  RNNTest.test_rnn_time_major -> test_rnn_time_major (batch_first=False)
  RNNTest.test_numerical_equivalence -> test_numerical_equivalence[cell x params source]
  RNNTest.test_numerical_equivalence_with_mask -> test_numerical_equivalence_with_mask
      (upstream's `jax.random.randint(key(0), ...)` draw -- [4, 4, 4] with jax 0.10.2 and
      x64, i.e. no padding at all -- plus explicit lengths [2, 4, 1], LSTMCell and GRUCell,
      so that the masking is exercised)
  RNNTest.test_numerical_equivalence_single_batch -> test_numerical_equivalence_single_batch
  RNNTest.test_numerical_equivalence_single_batch_nn_scan -> same name (nn.scan'd LSTMCell
      with the converted params as the reference)
  RNNTest.test_numerical_equivalence_single_batch_jax_scan -> same name (lax.scan of
      cell.apply as the reference)
  RNNTest.test_reverse -> test_reverse[ones, random] (the bidirectional reverse half)
  RNNTest.test_reverse_but_keep_order -> test_reverse_but_keep_order[ones, random]
  RNNTest.test_flip_sequence, _more_feature_dims, _time_major, _time_major_more_feature_dims
      -> test_reverse_direction_flips_only_the_valid_part[batch_major, time_major]: the
      upstream lengths [4, 2] over 5 steps, batch- and time-major; upstream's expectation
      on `flip_sequences` is kept, and what our impl relies on -- the reverse direction of
      `nn.RNN(reverse=True, keep_order=True)` with `seq_lengths` -- must equal our
      bidirectional GRU's reverse half and the `scan` impl's (PyTorch's packed semantics);
      the "more feature dims" variants are the feature axis every RNN input has
  RNNTest.test_basic_seq_lengths -> test_basic_seq_lengths (x (2, 10, 6), 265 features)
  BidirectionalTest.test_bidirectional -> test_bidirectional
  BidirectionalTest.test_shared_cell -> test_shared_cell (reverse params = forward params)
  BidirectionalTest.test_custom_merge_fn -> test_custom_merge_fn (merge applied to our halves)
  BidirectionalTest.test_return_carry -> test_return_carry
Added (semantic differences stated above): test_initial_carry_order_is_c_h,
  test_seq_length_zero.
Not adapted:
  RNNTest.test_rnn_with_spatial_dimensions -- ConvLSTMCell: no PyTorch LSTM/GRU counterpart,
      the impl runs only LSTMCell/OptimizedLSTMCell/GRUCell.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax.linen.recurrent import flip_sequences  # noqa: E402

import rnnbench.jax  # noqa: E402
from rnnbench.converters import from_flax_linen, to_flax_linen  # noqa: E402
from rnnbench.core.params import init_params  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402

F32 = jnp.float32
CELL_TYPES = {"LSTMCell": "lstm", "OptimizedLSTMCell": "lstm", "GRUCell": "gru"}


# ---- helpers ---------------------------------------------------------------------------


def make_cell(cell_type: str, features: int):
    return getattr(nn, cell_type)(features)


def spec_of(cell_type, input_size, hidden_size, **kw) -> RNNSpec:
    return RNNSpec(CELL_TYPES[cell_type], input_size, hidden_size, **kw)


def canonical_from_linen(spec: RNNSpec, cell_type: str, cell_trees) -> dict:
    """Canonical float32 params from one linen cell tree per direction (layer 0), checking
    that converting them back gives each tree exactly."""
    params = {}
    for d, tree in enumerate(cell_trees):
        params.update(from_flax_linen(spec, tree, 0, d, cell_type, dtype=np.float32))
    params = {k: params[k] for k in spec.param_names()}
    for d, tree in enumerate(cell_trees):
        back = to_flax_linen(spec, params, 0, d, cell_type, dtype=np.float32)["params"]
        assert jax.tree.structure(back) == jax.tree.structure(jax.tree.map(np.asarray, dict(tree)))
        jax.tree.map(np.testing.assert_array_equal, back, jax.tree.map(np.asarray, dict(tree)))
    return params


def linen_tree(spec: RNNSpec, params, cell_type: str, direction: int = 0) -> dict:
    """The linen cell tree (inner dict) of layer 0 / `direction`, float32 jnp arrays."""
    tree = to_flax_linen(spec, params, 0, direction, cell_type, dtype=np.float32)["params"]
    return jax.tree.map(jnp.asarray, tree)


def ours(spec: RNNSpec, params, x, hx=None, *, lengths=None, backend="flax_linen", **options):
    """rnnbench.jax on `spec`'s layout; returns NumPy (output, h_n, c_n or None)."""
    if spec.cell == "lstm":
        out, (h, c) = rnnbench.jax.lstm(params, x, hx, lengths=lengths, bidirectional=spec.bidirectional,
                                    batch_first=spec.batch_first, backend=backend, **options)
        return np.asarray(out), np.asarray(h), np.asarray(c)
    options.pop("cell_type", None)
    out, h = rnnbench.jax.gru(params, x, hx, lengths=lengths, bidirectional=spec.bidirectional,
                          batch_first=spec.batch_first, backend=backend, **options)
    return np.asarray(out), np.asarray(h), None


def torch_state(cell: str, carry):
    """A linen carry -> (h, c) (c None for a GRU): linen's LSTM carry is (c, h)."""
    if cell == "lstm":
        c, h = carry
        return np.asarray(h), np.asarray(c)
    return np.asarray(carry), None


def assert_state(cell, h_n, c_n, index, carry, rtol, batch=slice(None)):
    h, c = torch_state(cell, carry)
    np.testing.assert_allclose(h_n[index][batch], h, rtol=rtol)
    if cell == "lstm":
        np.testing.assert_allclose(c_n[index][batch], c, rtol=rtol)


def assert_linen_param_shapes(cell_tree, channels_in, channels_out):
    """Upstream's loop over `variables['params']['cell']`."""
    for layer_params in cell_tree.values():
        if "bias" in layer_params:
            assert layer_params["bias"].shape == (channels_out,)
        assert layer_params["kernel"].shape[0] in [channels_in, channels_out]
        assert layer_params["kernel"].shape[1] == channels_out


# ---- RNNTest -----------------------------------------------------------------------------


@pytest.mark.parametrize("cell_type", list(CELL_TYPES))
def test_rnn_basic_forward(cell_type):
    batch_size, seq_len, channels_in, channels_out = 10, 40, 5, 15
    rnn = nn.RNN(make_cell(cell_type, channels_out), return_carry=True)
    xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    variables = rnn.init(jax.random.key(0), xs)
    carry, ys = rnn.apply(variables, xs)
    assert ys.shape == (batch_size, seq_len, channels_out)
    assert_linen_param_shapes(variables["params"]["cell"], channels_in, channels_out)

    spec = spec_of(cell_type, channels_in, channels_out, batch_first=True)  # Flax's default layout
    params = canonical_from_linen(spec, cell_type, [variables["params"]["cell"]])
    assert {k: v.shape for k, v in params.items()} == spec.param_shapes()  # PyTorch's shapes
    assert_linen_param_shapes(linen_tree(spec, params, cell_type), channels_in, channels_out)
    out, h_n, c_n = ours(spec, params, xs, cell_type=cell_type)
    assert out.shape == (batch_size, seq_len, channels_out)
    np.testing.assert_allclose(out, ys, rtol=1e-5)
    assert_state(spec.cell, h_n, c_n, 0, carry, 1e-5)


def test_rnn_multiple_batch_dims():
    batch_dims, seq_len, channels_in, channels_out = (10, 11), 40, 5, 15
    rnn = nn.RNN(nn.LSTMCell(channels_out), return_carry=True)
    xs = jnp.ones((*batch_dims, seq_len, channels_in), F32)
    variables = rnn.init(jax.random.key(0), xs)
    carry, ys = rnn.apply(variables, xs)
    assert ys.shape == (*batch_dims, seq_len, channels_out)
    assert_linen_param_shapes(variables["params"]["cell"], channels_in, channels_out)

    spec = spec_of("LSTMCell", channels_in, channels_out, batch_first=True)
    params = canonical_from_linen(spec, "LSTMCell", [variables["params"]["cell"]])
    # rnnbench.jax takes PyTorch's 3-D (or unbatched 2-D) x only ...
    with pytest.raises(ValueError, match=r"3-D .*got shape \(10, 11, 40, 5\)"):
        ours(spec, params, xs, cell_type="LSTMCell")

    # ... and extra batch dims are a jax.vmap away
    def one(x):
        out, (h, c) = rnnbench.jax.lstm(params, x, batch_first=True, backend="flax_linen", cell_type="LSTMCell")
        return out, h, c

    out, h_n, c_n = jax.vmap(one)(xs)
    assert out.shape == (*batch_dims, seq_len, channels_out) and h_n.shape == (batch_dims[0], 1, batch_dims[1],
                                                                             channels_out)
    np.testing.assert_allclose(out, ys, rtol=1e-5)
    c, h = carry
    np.testing.assert_allclose(h_n[:, 0], h, rtol=1e-5)
    np.testing.assert_allclose(c_n[:, 0], c, rtol=1e-5)


def test_rnn_unroll():
    batch_size, seq_len, channels_in, channels_out = 10, 40, 5, 15
    rnn = nn.RNN(nn.LSTMCell(channels_out), unroll=10, return_carry=True)
    xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    variables = rnn.init(jax.random.key(0), xs)
    carry, ys = rnn.apply(variables, xs)
    assert ys.shape == (batch_size, seq_len, channels_out)
    assert_linen_param_shapes(variables["params"]["cell"], channels_in, channels_out)

    spec = spec_of("LSTMCell", channels_in, channels_out, batch_first=True)
    params = canonical_from_linen(spec, "LSTMCell", [variables["params"]["cell"]])
    out, h_n, c_n = ours(spec, params, xs, cell_type="LSTMCell", unroll=10)
    assert out.shape == (batch_size, seq_len, channels_out)
    np.testing.assert_allclose(out, ys, rtol=1e-5)
    assert_state("lstm", h_n, c_n, 0, carry, 1e-5)
    rolled, _, _ = ours(spec, params, xs, cell_type="LSTMCell", unroll=1)  # unroll changes no value
    np.testing.assert_allclose(out, rolled, rtol=1e-5)


def test_rnn_time_major():
    seq_len, batch_size, channels_in, channels_out = 40, 10, 5, 15
    rnn = nn.RNN(nn.LSTMCell(channels_out), time_major=True, return_carry=True)
    xs = jnp.ones((seq_len, batch_size, channels_in), F32)
    variables = rnn.init(jax.random.key(0), xs)
    carry, ys = rnn.apply(variables, xs)
    for leaf in jax.tree_util.tree_leaves(carry):  # carry state should not be zeros after apply
        assert not np.allclose(leaf, jnp.zeros_like(leaf))
        assert leaf.shape == (batch_size, channels_out)
    assert ys.shape == (seq_len, batch_size, channels_out)
    assert_linen_param_shapes(variables["params"]["cell"], channels_in, channels_out)

    spec = spec_of("LSTMCell", channels_in, channels_out)  # batch_first=False: PyTorch's time-major default
    params = canonical_from_linen(spec, "LSTMCell", [variables["params"]["cell"]])
    out, h_n, c_n = ours(spec, params, xs, cell_type="LSTMCell")
    assert out.shape == (seq_len, batch_size, channels_out)
    # the state carries PyTorch's leading num_layers * num_directions axis
    assert h_n.shape == c_n.shape == (1, batch_size, channels_out)
    for leaf in (h_n, c_n):
        assert not np.allclose(leaf, 0)
    np.testing.assert_allclose(out, ys, rtol=1e-5)
    assert_state("lstm", h_n, c_n, 0, carry, 1e-5)


def _step_reference(cell_type, tree, xs, features):
    """Upstream's reference: `cell.apply` step by step (batch-major xs); returns (ys list, carries)."""
    cell = make_cell(cell_type, features)
    carry = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
    ys, carries = [], []
    for i in range(xs.shape[1]):
        carry, y = cell.apply({"params": tree}, carry, xs[:, i, :])
        ys.append(y)
        carries.append(carry)
    return ys, carries


@pytest.mark.parametrize("source", ["flax_init", "canonical"])
@pytest.mark.parametrize("cell_type", list(CELL_TYPES))
def test_numerical_equivalence(cell_type, source):
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    rnn = nn.RNN(make_cell(cell_type, channels_out), return_carry=True)
    xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    spec = spec_of(cell_type, channels_in, channels_out, batch_first=True)
    if source == "flax_init":  # upstream: Flax's initialisation (zero biases)
        (carry, ys), variables = rnn.init_with_output(jax.random.key(0), xs)
        cell_params = variables["params"]["cell"]
        params = canonical_from_linen(spec, cell_type, [cell_params])
    else:  # PyTorch-style parameters: b_ih, b_hh (and the GRU's b_hn) all non-zero
        params = {k: v.astype(np.float32) for k, v in init_params(spec, 11).items()}
        cell_params = linen_tree(spec, params, cell_type)
        carry, ys = rnn.apply({"params": {"cell": cell_params}}, xs)

    step_ys, step_carries = _step_reference(cell_type, cell_params, xs, channels_out)
    for i in range(seq_len):  # upstream's assertions on Flax's nn.RNN
        np.testing.assert_allclose(step_ys[i], ys[:, i, :], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), step_carries[-1], carry)

    out, h_n, c_n = ours(spec, params, xs, cell_type=cell_type)
    for i in range(seq_len):
        np.testing.assert_allclose(out[:, i, :], step_ys[i], rtol=1e-5)
    assert_state(spec.cell, h_n, c_n, 0, step_carries[-1], 1e-5)
    if source == "canonical":  # the converter's semantics are PyTorch's: the scan impl agrees
        ref_out, ref_h, ref_c = ours(spec, params, xs, backend="scan")
        np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h_n, ref_h, rtol=1e-5, atol=1e-6)
        if spec.cell == "lstm":
            np.testing.assert_allclose(c_n, ref_c, rtol=1e-5, atol=1e-6)


UPSTREAM_LENGTHS = "randint(key(0))"


@pytest.mark.parametrize("cell_type,lengths_source", [("LSTMCell", UPSTREAM_LENGTHS), ("LSTMCell", "explicit"),
                                                      ("GRUCell", "explicit")])
def test_numerical_equivalence_with_mask(cell_type, lengths_source):
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    if lengths_source == UPSTREAM_LENGTHS:
        seq_lengths = jax.random.randint(jax.random.key(0), (batch_size,), minval=1, maxval=seq_len + 1)
    else:
        seq_lengths = jnp.array([2, 4, 1])
    rnn = nn.RNN(make_cell(cell_type, channels_out), return_carry=True)
    xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    (carry, ys), variables = rnn.init_with_output(jax.random.key(0), xs, seq_lengths=seq_lengths)
    cell_params = variables["params"]["cell"]
    step_ys, carries = _step_reference(cell_type, cell_params, xs, channels_out)
    for i in range(seq_len):  # linen does not mask: every step equals the unmasked recurrence
        np.testing.assert_allclose(step_ys[i], ys[:, i, :], rtol=1e-5)
    for batch_idx, length in enumerate(seq_lengths):  # ... and the carry is the one at length - 1
        t = int(length) - 1
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a[batch_idx], b[batch_idx], rtol=1e-5), carries[t],
                     carry)

    spec = spec_of(cell_type, channels_in, channels_out, batch_first=True)
    params = canonical_from_linen(spec, cell_type, [cell_params])
    out, h_n, c_n = ours(spec, params, xs, lengths=seq_lengths, cell_type=cell_type)
    for batch_idx, length in enumerate(np.asarray(seq_lengths)):
        for i in range(seq_len):
            if i < length:
                np.testing.assert_allclose(out[batch_idx, i], step_ys[i][batch_idx], rtol=1e-5)
            else:  # PyTorch's packed semantics: zero past the length (linen: the continued recurrence)
                np.testing.assert_array_equal(out[batch_idx, i], 0.0)
                assert not np.allclose(ys[batch_idx, i], 0.0)
        h, c = torch_state(spec.cell, carries[int(length) - 1])
        np.testing.assert_allclose(h_n[0, batch_idx], h[batch_idx], rtol=1e-5)
        if c is not None:
            np.testing.assert_allclose(c_n[0, batch_idx], c[batch_idx], rtol=1e-5)


def test_numerical_equivalence_single_batch():
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    rnn = nn.RNN(nn.LSTMCell(channels_out), return_carry=True)
    xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    (carry, ys), variables = rnn.init_with_output(jax.random.key(0), xs)
    cell_params = variables["params"]["cell"]
    spec = spec_of("LSTMCell", channels_in, channels_out, batch_first=True)
    params = canonical_from_linen(spec, "LSTMCell", [cell_params])
    out, h_n, c_n = ours(spec, params, xs, cell_type="LSTMCell")

    for batch_idx in range(batch_size):
        cell_carry = rnn.cell.initialize_carry(jax.random.key(0), xs[:1, 0].shape)
        for i in range(seq_len):
            cell_carry, y = rnn.cell.apply({"params": cell_params}, cell_carry, xs[batch_idx, i, :][None])
            np.testing.assert_allclose(y[0], ys[batch_idx, i, :], rtol=1e-6)
            np.testing.assert_allclose(out[batch_idx, i, :], y[0], rtol=1e-6)
        carry_i = jax.tree.map(lambda x: x[batch_idx: batch_idx + 1], carry)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), cell_carry, carry_i)
        assert_state("lstm", h_n, c_n, 0, cell_carry, 1e-6, batch=slice(batch_idx, batch_idx + 1))


def test_numerical_equivalence_single_batch_nn_scan():
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    cell = nn.LSTMCell(channels_out)
    rnn = nn.scan(nn.LSTMCell, in_axes=1, out_axes=1, variable_broadcast="params",
                  split_rngs={"params": False})(channels_out)
    xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    carry = rnn.initialize_carry(jax.random.key(0), xs[:, 0].shape)
    (carry, ys), variables = rnn.init_with_output(jax.random.key(0), carry, xs)
    cell_params = variables["params"]
    spec = spec_of("LSTMCell", channels_in, channels_out, batch_first=True)
    params = canonical_from_linen(spec, "LSTMCell", [cell_params])
    out, h_n, c_n = ours(spec, params, xs, cell_type="LSTMCell")
    np.testing.assert_allclose(out, ys, rtol=1e-5)

    for batch_idx in range(batch_size):
        cell_carry = cell.initialize_carry(jax.random.key(0), xs[:1, 0].shape)
        for i in range(seq_len):
            cell_carry, y = cell.apply({"params": cell_params}, cell_carry, xs[batch_idx: batch_idx + 1, i, :])
            np.testing.assert_allclose(y[0], ys[batch_idx, i, :], rtol=1e-5)
            np.testing.assert_allclose(out[batch_idx, i, :], y[0], rtol=1e-5)
        carry_i = jax.tree.map(lambda x: x[batch_idx: batch_idx + 1], carry)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), cell_carry, carry_i)
        assert_state("lstm", h_n, c_n, 0, cell_carry, 1e-5, batch=slice(batch_idx, batch_idx + 1))


def test_numerical_equivalence_single_batch_jax_scan():
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    xs = jax.random.uniform(jax.random.key(0), (batch_size, seq_len, channels_in), F32)
    cell = nn.LSTMCell(channels_out)
    carry = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
    cell_params = cell.init(jax.random.key(0), carry, xs[:, 0])["params"]

    def scan_fn(carry, x):
        return cell.apply({"params": cell_params}, carry, x)

    carry, ys = jax.lax.scan(scan_fn, carry, xs.swapaxes(0, 1))
    ys = ys.swapaxes(0, 1)
    cell_carry = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
    for i in range(seq_len):
        cell_carry, y = cell.apply({"params": cell_params}, cell_carry, xs[:, i, :])
        np.testing.assert_allclose(y, ys[:, i, :], rtol=1e-4)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4), cell_carry, carry)

    spec = spec_of("LSTMCell", channels_in, channels_out, batch_first=True)
    params = canonical_from_linen(spec, "LSTMCell", [cell_params])
    out, h_n, c_n = ours(spec, params, xs, cell_type="LSTMCell")
    np.testing.assert_allclose(out, ys, rtol=1e-4)
    assert_state("lstm", h_n, c_n, 0, carry, 1e-4)


def _reverse_case(inputs: str, keep_order: bool):
    """Upstream's reverse RNN (LSTMCell, key 0) and a bidirectional spec whose reverse
    direction holds its parameters (the forward direction holds the same ones)."""
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    rnn = nn.RNN(nn.LSTMCell(channels_out), return_carry=True, reverse=True, keep_order=keep_order)
    if inputs == "ones":  # upstream's input
        xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    else:  # distinct steps, so that the order the steps are read in shows
        xs = jax.random.normal(jax.random.key(1), (batch_size, seq_len, channels_in), F32)
    (carry, ys), variables = rnn.init_with_output(jax.random.key(0), xs)
    cell_params = variables["params"]["cell"]
    spec = spec_of("LSTMCell", channels_in, channels_out, batch_first=True, bidirectional=True)
    params = canonical_from_linen(spec, "LSTMCell", [cell_params, cell_params])
    out, h_n, c_n = ours(spec, params, xs, cell_type="LSTMCell")
    return rnn, xs, carry, ys, cell_params, out, h_n, c_n


@pytest.mark.parametrize("inputs", ["ones", "random"])
def test_reverse(inputs):
    rnn, xs, carry, ys, cell_params, out, h_n, c_n = _reverse_case(inputs, keep_order=False)
    batch_size, seq_len, _ = xs.shape
    H = ys.shape[-1]
    backward = out[..., H:]  # PyTorch's reverse direction: the second half of a bidirectional output
    for batch_idx in range(batch_size):
        cell_carry = rnn.cell.initialize_carry(jax.random.key(0), xs[:1, 0].shape)
        for i in range(seq_len):
            cell_carry, y = rnn.cell.apply({"params": cell_params}, cell_carry, xs[batch_idx, seq_len - i - 1, :][None])
            np.testing.assert_allclose(y[0], ys[batch_idx, i, :], rtol=1e-5)  # linen: in reversed order
            np.testing.assert_allclose(backward[batch_idx, seq_len - i - 1], y[0], rtol=1e-5)  # ours: input order
        carry_i = jax.tree.map(lambda x: x[batch_idx: batch_idx + 1], carry)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), cell_carry, carry_i)
        assert_state("lstm", h_n, c_n, 1, cell_carry, 1e-5, batch=slice(batch_idx, batch_idx + 1))
    np.testing.assert_allclose(backward, ys[:, ::-1], rtol=1e-5)


@pytest.mark.parametrize("inputs", ["ones", "random"])
def test_reverse_but_keep_order(inputs):
    rnn, xs, carry, ys, cell_params, out, h_n, c_n = _reverse_case(inputs, keep_order=True)
    batch_size, seq_len, _ = xs.shape
    H = ys.shape[-1]
    for batch_idx in range(batch_size):
        cell_carry = rnn.cell.initialize_carry(jax.random.key(0), xs[:1, 0].shape)
        for i in range(seq_len):
            cell_carry, y = rnn.cell.apply({"params": cell_params}, cell_carry, xs[batch_idx, seq_len - i - 1, :][None])
            np.testing.assert_allclose(y[0], ys[batch_idx, seq_len - i - 1, :], rtol=1e-5)
        carry_i = jax.tree.map(lambda x: x[batch_idx: batch_idx + 1], carry)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), cell_carry, carry_i)
        assert_state("lstm", h_n, c_n, 1, cell_carry, 1e-5, batch=slice(batch_idx, batch_idx + 1))
    np.testing.assert_allclose(out[..., H:], ys, rtol=1e-5)  # keep_order=True is PyTorch's layout


@pytest.mark.parametrize("time_major", [False, True], ids=["batch_major", "time_major"])
def test_reverse_direction_flips_only_the_valid_part(time_major):
    """Upstream's flip_sequences cases (lengths [4, 2], 5 steps), as the reverse direction sees them."""
    seq_lengths = jnp.array([4, 2])
    batch_size, seq_len, channels_in, channels_out = 2, 5, 3, 4
    shape = (seq_len, batch_size, channels_in) if time_major else (batch_size, seq_len, channels_in)
    x = jnp.arange(np.prod(shape), dtype=F32).reshape(shape) / 10.0
    t_axis = 0 if time_major else 1
    flipped = flip_sequences(x, seq_lengths, num_batch_dims=1, time_major=time_major)
    for b, length in enumerate([4, 2]):  # upstream's expectation
        np.testing.assert_array_equal(np.take(np.asarray(flipped), b, axis=1 - t_axis)[:length],
                                      np.take(np.asarray(x), b, axis=1 - t_axis)[:length][::-1])

    spec = spec_of("GRUCell", channels_in, channels_out, batch_first=not time_major, bidirectional=True)
    params = {k: v.astype(np.float32) for k, v in init_params(spec, 5).items()}
    bwd = nn.RNN(nn.GRUCell(channels_out), time_major=time_major, return_carry=True, reverse=True, keep_order=True)
    carry, ys = bwd.apply({"params": {"cell": linen_tree(spec, params, "GRUCell", 1)}}, x, seq_lengths=seq_lengths)
    # the same thing spelled out: a forward run over flip_sequences(x), flipped back
    fwd = nn.RNN(nn.GRUCell(channels_out), time_major=time_major, return_carry=True)
    carry2, ys2 = fwd.apply({"params": {"cell": linen_tree(spec, params, "GRUCell", 1)}}, flipped,
                            seq_lengths=seq_lengths)
    ys2 = flip_sequences(ys2, seq_lengths, num_batch_dims=1, time_major=time_major)

    out, h_n, _ = ours(spec, params, x, lengths=seq_lengths, cell_type="GRUCell")
    H = channels_out
    for b, length in enumerate([4, 2]):
        take = lambda a: np.take(np.asarray(a), b, axis=1 - t_axis)  # noqa: E731  (steps, features) of sequence b
        np.testing.assert_allclose(take(out)[:length, H:], take(ys)[:length], rtol=1e-5)
        np.testing.assert_allclose(take(ys2)[:length], take(ys)[:length], rtol=1e-5)
        np.testing.assert_array_equal(take(out)[length:], 0.0)  # ours: zero past the length, both halves
    # PyTorch's packed semantics (the reverse direction of a padded sequence is the reverse
    # direction of the sequence alone) are the scan impl's, tested against torch elsewhere
    ref_out, ref_h, _ = ours(spec, params, x, lengths=seq_lengths, backend="scan")
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_n, ref_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_n[1], carry, rtol=1e-5)
    np.testing.assert_allclose(h_n[1], carry2, rtol=1e-5)


def test_basic_seq_lengths():
    x = jnp.ones((2, 10, 6), F32)
    lstm = nn.RNN(nn.LSTMCell(265))
    variables = jax.jit(lstm.init)(jax.random.key(0), x)  # jitted: the eager 265x265 orthogonal init takes seconds
    y = lstm.apply(variables, x, seq_lengths=jnp.array([5, 5]))

    spec = spec_of("LSTMCell", 6, 265, batch_first=True)
    params = canonical_from_linen(spec, "LSTMCell", [variables["params"]["cell"]])
    out, _, _ = ours(spec, params, x, lengths=jnp.array([5, 5]), cell_type="LSTMCell")
    assert out.shape == y.shape == (2, 10, 265)
    np.testing.assert_allclose(out[:, :5], y[:, :5], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(out[:, 5:], 0.0)  # linen's y[:, 5:] is the recurrence over the padding
    assert not np.allclose(y[:, 5:], 0.0)


# ---- BidirectionalTest ----------------------------------------------------------------


def _bidirectional_case(**bidirectional_kw):
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    shared = bidirectional_kw.pop("shared", False)
    if shared:
        cell = nn.LSTMCell(channels_out)
        bdirectional = nn.Bidirectional(nn.RNN(cell), nn.RNN(cell), **bidirectional_kw)
    else:
        bdirectional = nn.Bidirectional(nn.RNN(nn.LSTMCell(channels_out)), nn.RNN(nn.LSTMCell(channels_out)),
                                        **bidirectional_kw)
    xs = jnp.ones((batch_size, seq_len, channels_in), F32)
    result, variables = bdirectional.init_with_output(jax.random.key(0), xs)
    tree = variables["params"]
    spec = spec_of("LSTMCell", channels_in, channels_out, batch_first=True, bidirectional=True)
    if shared:  # one cell: Flax holds one set of params, used by both directions
        assert set(tree) == {"forward_rnn"}
        trees = [tree["forward_rnn"]["cell"]] * 2
    else:
        trees = [tree["forward_rnn"]["cell"], tree["backward_rnn"]["cell"]]
    params = canonical_from_linen(spec, "LSTMCell", trees)
    return result, ours(spec, params, xs, cell_type="LSTMCell"), (batch_size, seq_len, channels_out)


def test_bidirectional():
    ys, (out, _, _), (batch_size, seq_len, channels_out) = _bidirectional_case()
    assert ys.shape == out.shape == (batch_size, seq_len, channels_out * 2)
    np.testing.assert_allclose(out, ys, rtol=1e-5)


def test_shared_cell():
    ys, (out, _, _), (batch_size, seq_len, channels_out) = _bidirectional_case(shared=True)
    assert ys.shape == out.shape == (batch_size, seq_len, channels_out * 2)
    np.testing.assert_allclose(out, ys, rtol=1e-5)
    H = channels_out  # the xs are all ones, so with shared params each half is the other's time reversal
    np.testing.assert_allclose(out[..., H:], out[:, ::-1, :H], rtol=1e-5)


def test_custom_merge_fn():
    ys, (out, _, _), (batch_size, seq_len, channels_out) = _bidirectional_case(merge_fn=lambda x, y: x + y)
    assert ys.shape == (batch_size, seq_len, channels_out)
    # PyTorch's (and rnnbench.jax's) output is always [forward, backward]; merge it as Flax would
    H = channels_out
    np.testing.assert_allclose(out[..., :H] + out[..., H:], ys, rtol=1e-5)


def test_return_carry():
    (carry, ys), (out, h_n, c_n), (batch_size, seq_len, channels_out) = _bidirectional_case(return_carry=True)
    carry_forward, carry_backward = carry
    assert ys.shape == out.shape == (batch_size, seq_len, channels_out * 2)
    assert jax.tree.map(jnp.shape, carry_forward) == ((batch_size, channels_out), (batch_size, channels_out))
    assert jax.tree.map(jnp.shape, carry_backward) == ((batch_size, channels_out), (batch_size, channels_out))
    # PyTorch's layout: (h_n, c_n), each (num_directions, B, H), forward then backward
    assert h_n.shape == c_n.shape == (2, batch_size, channels_out)
    assert_state("lstm", h_n, c_n, 0, carry_forward, 1e-5)
    assert_state("lstm", h_n, c_n, 1, carry_backward, 1e-5)


# ---- semantic differences -------------------------------------------------------------


def test_initial_carry_order_is_c_h():
    """linen's LSTM carry is (c, h); rnnbench.jax's hx is PyTorch's (h0, c0) with a leading axis."""
    batch_size, seq_len, channels_in, channels_out = 3, 4, 5, 6
    spec = spec_of("OptimizedLSTMCell", channels_in, channels_out, batch_first=True)
    params = {k: v.astype(np.float32) for k, v in init_params(spec, 3).items()}
    xs = jax.random.normal(jax.random.key(2), (batch_size, seq_len, channels_in), F32)
    h0 = jax.random.normal(jax.random.key(3), (batch_size, channels_out), F32)
    c0 = 2.0 * jax.random.normal(jax.random.key(4), (batch_size, channels_out), F32)
    rnn = nn.RNN(nn.OptimizedLSTMCell(channels_out), return_carry=True)
    variables = {"params": {"cell": linen_tree(spec, params, "OptimizedLSTMCell")}}
    carry, ys = rnn.apply(variables, xs, initial_carry=(c0, h0))
    out, h_n, c_n = ours(spec, params, xs, (h0[None], c0[None]))
    np.testing.assert_allclose(out, ys, rtol=1e-5)
    assert_state("lstm", h_n, c_n, 0, carry, 1e-5)
    _, swapped = rnn.apply(variables, xs, initial_carry=(h0, c0))  # the order matters
    assert not np.allclose(swapped, out, atol=1e-3)


def test_seq_length_zero():
    """linen takes a length of 0 and returns the carry at index -1 (the last padded step);
    PyTorch refuses empty sequences, and so does rnnbench.jax."""
    batch_size, seq_len, channels_in, channels_out = 2, 4, 5, 6
    spec = spec_of("GRUCell", channels_in, channels_out, batch_first=True)
    params = {k: v.astype(np.float32) for k, v in init_params(spec, 4).items()}
    xs = jax.random.normal(jax.random.key(5), (batch_size, seq_len, channels_in), F32)
    lengths = jnp.array([0, 3])
    rnn = nn.RNN(nn.GRUCell(channels_out), return_carry=True)
    variables = {"params": {"cell": linen_tree(spec, params, "GRUCell")}}
    carry, _ = rnn.apply(variables, xs, seq_lengths=lengths)
    full_carry, _ = rnn.apply(variables, xs)
    np.testing.assert_allclose(carry[0], full_carry[0], rtol=1e-6)  # length 0 -> the carry after all 4 steps
    with pytest.raises(ValueError, match=r"lengths must be in \[1, T=4\], got \[0\]"):
        ours(spec, params, xs, lengths=lengths, cell_type="GRUCell")
