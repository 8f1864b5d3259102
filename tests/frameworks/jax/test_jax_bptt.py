"""`jax.bptt` (lax.scan forward + custom_vjp hand-written BPTT) against the float64 reference.

Forward and every gradient (x, h0, c0, each parameter) through the adapter's `jax.vjp`,
which runs the hand-written backward; float64 to 1e-9, float32 to 2e-5.  Plus
`check_grads` (the custom_vjp against finite differences), `vmap`, and `jit` of a
gradient.  XLA compiles dominate, so the configurations are tiny and few.  The catalogue
cells (`rnnbench/jax/backends/bptt/steps.py`) also run on every shared vector in tests/cross/test_parity_matrix.py;
here each gets one all-options case (extras moved off their init, so the gain and
peephole terms count) and a finite-difference check.
"""

from __future__ import annotations


import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)  # float64 cases; float32 ones pass explicit dtypes

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import rnnbench.jax  # noqa: E402
from rnnbench.jax import backends  # noqa: E402
from rnnbench.jax.adapter import get_adapter  # noqa: E402
from rnnbench import reference  # noqa: E402
from rnnbench.core.params import init_params  # noqa: E402
from rnnbench.core.spec import RNNSpec  # noqa: E402
from rnnbench.core.tolerances import assert_close  # noqa: E402

ADAPTER = get_adapter("bptt")


def _params(spec: RNNSpec, rng) -> dict:
    """init_params with a catalogue cell's extras moved off their init (gains 1, biases 0)."""
    params = init_params(spec, rng)
    for e in spec.cell_def.extra_params:
        for layer, direction in spec.layers_and_directions():
            name = f"{e.prefix}_{spec.suffix(layer, direction)}"
            params[name] = params[name] + 0.3 * rng.standard_normal(params[name].shape)
    return params


def _case(spec: RNNSpec, *, T=5, B=4, seed=0, lengths=None, state=False):
    rng = np.random.default_rng(seed)
    params = _params(spec, rng)
    x = rng.standard_normal((T, B, spec.input_size))
    shapes = spec.state_shapes(B)
    h0 = rng.standard_normal(shapes["h"]) if state else None
    c0 = rng.standard_normal(shapes["c"]) if state and spec.family == "lstm" else None
    lengths = None if lengths is None else np.asarray(lengths, dtype=np.int64)
    forward = reference.run_case(spec, params, x, h0, c0, lengths)
    cot = {k: rng.standard_normal(v.shape) for k, v in forward.items()}
    return params, x, h0, c0, lengths, cot


CONFIGS = {
    "lstm": (RNNSpec("lstm", 3, 4), {}),
    "lstm_proj_lengths": (RNNSpec("lstm", 3, 4, proj_size=2), dict(lengths=[3, 5, 1, 4])),
    "gru": (RNNSpec("gru", 3, 4), {}),
    "gru_nobias_lengths": (RNNSpec("gru", 3, 4, bias=False), dict(lengths=[2, 1, 5, 3])),
    "lstm_bidir2_states_lengths": (RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True),
                                   dict(lengths=[4, 1, 5, 2], state=True)),
    "lstmp_bidir2_states": (RNNSpec("lstm", 3, 4, num_layers=2, bidirectional=True, proj_size=3, bias=False),
                            dict(state=True)),
    "gru_bidir2_states_lengths": (RNNSpec("gru", 3, 4, num_layers=2, bidirectional=True),
                                  dict(lengths=[5, 3, 1, 2], state=True)),
    **{f"{cell}_bidir2_states_lengths": (RNNSpec(cell, 3, 4, num_layers=2, bidirectional=True),
                                         dict(lengths=[4, 1, 5, 2], state=True))
       for cell in ("ln_lstm", "peephole_lstm", "gru_reset_before")},
    **{f"{cell}_nobias": (RNNSpec(cell, 3, 4, bias=False), {})
       for cell in ("ln_lstm", "peephole_lstm", "gru_reset_before")},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_forward_and_all_gradients_match_reference_float64(name):
    spec, kw = CONFIGS[name]
    params, x, h0, c0, lengths, cot = _case(spec, **kw)
    expected = reference.run_case(spec, params, x, h0, c0, lengths, cot)
    got = ADAPTER.run_case(spec, params, x, h0, c0, lengths, cot, dtype="float64")
    assert set(got) == set(expected)  # a gradient for x, every state given and every parameter
    assert_close(expected, got, "float64", context=f"jax.bptt {name}", spec=spec, x=x)


@pytest.mark.parametrize("name", ["lstm_proj_lengths", "gru_bidir2_states_lengths", "ln_lstm_bidir2_states_lengths"])
def test_float32_matches_reference(name):
    spec, kw = CONFIGS[name]
    params, x, h0, c0, lengths, cot = _case(spec, seed=1, **kw)
    expected = reference.run_case(spec, params, x, h0, c0, lengths, cot)
    got = ADAPTER.run_case(spec, params, x, h0, c0, lengths, cot, dtype="float32")
    assert_close(expected, got, "float32", context=f"jax.bptt {name} float32", spec=spec, x=x)


@pytest.mark.parametrize("cell, proj", [("lstm", 2), ("gru", 0), ("ln_lstm", 0), ("peephole_lstm", 0),
                                        ("gru_reset_before", 0)])
def test_custom_vjp_against_finite_differences(cell, proj):
    spec = RNNSpec(cell, 2, 3, proj_size=proj)
    rng = np.random.default_rng(2)
    params = {k: jnp.asarray(v) for k, v in _params(spec, rng).items()}
    x = jnp.asarray(rng.standard_normal((3, 2, 2)))
    shapes = spec.state_shapes(2)
    h0 = jnp.asarray(rng.standard_normal(shapes["h"]))
    hx = (h0, jnp.asarray(rng.standard_normal(shapes["c"]))) if spec.family == "lstm" else h0
    lengths = jnp.asarray([3, 1])

    def f(params, x, hx):
        out = rnnbench.jax.rnn(params, x, hx, cell=cell, lengths=lengths, proj_size=proj, backend="bptt")
        return jax.tree_util.tree_leaves(out)

    check_grads(f, (params, x, hx), order=1, modes=("rev",))


@pytest.mark.parametrize("cell", ["lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before"])
def test_float32_gradients_keep_their_inputs_dtype(cell):
    """Every gradient of a float32 run is float32, though float64 is enabled here: a backward that
    accumulated in a default-dtype (float64) buffer would hand back float64 gradients, within the
    float32 bound and so unseen by the value checks."""
    spec = RNNSpec(cell, 2, 3, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(4)
    params = {k: jnp.asarray(v, jnp.float32) for k, v in _params(spec, rng).items()}
    x = jnp.asarray(rng.standard_normal((3, 2, 2)), jnp.float32)
    shapes = spec.state_shapes(2)
    h0 = jnp.asarray(rng.standard_normal(shapes["h"]), jnp.float32)
    hx = (h0, jnp.asarray(rng.standard_normal(shapes["c"]), jnp.float32)) if spec.family == "lstm" else h0

    def loss(params, x, hx):
        out = rnnbench.jax.rnn(params, x, hx, cell=cell, num_layers=2, bidirectional=True, lengths=jnp.asarray([3, 1]),
                           backend="bptt")
        return sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(out))

    grads = jax.grad(loss, argnums=(0, 1, 2))(params, x, hx)
    dtypes = {str(path): leaf.dtype for path, leaf in jax.tree_util.tree_flatten_with_path(grads)[0]}
    assert len(dtypes) == len(params) + 1 + (2 if spec.family == "lstm" else 1)
    assert set(dtypes.values()) == {jnp.dtype(jnp.float32)}, {k: v for k, v in dtypes.items() if v != jnp.float32}


@pytest.mark.parametrize("cell", ["lstm", "ln_lstm"])
def test_vmap_and_jit_of_grad_agree_with_scan(cell):
    """vmap over a batch of problems and a jitted gradient give the same numbers as `scan`
    (ln_lstm: the catalogue cells' backward uses `lax.optimization_barrier`, batched here)."""
    spec = RNNSpec(cell, 2, 3)
    rng = np.random.default_rng(3)
    params = {k: jnp.asarray(v) for k, v in _params(spec, rng).items()}
    xs = jnp.asarray(rng.standard_normal((2, 4, 3, 2)))  # 2 problems of (T=4, B=3, I=2)

    def loss(params, x, impl):
        out, (h_n, c_n) = rnnbench.jax.rnn(params, x, cell=cell, backend=impl)
        return jnp.sum(out ** 2) + jnp.sum(h_n * c_n)

    per_problem = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, None)), static_argnums=2)
    got, want = per_problem(params, xs, "bptt"), per_problem(params, xs, "scan")
    for k in params:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=0, atol=1e-12, err_msg=k)


def test_refuses_a_cell_without_a_hand_written_backward():
    """A user's own cell (registered at run time, e.g. tests/cross/test_own_cell.py's mgu) runs on scan only."""
    reason = backends.unsupported_cell_reason("bptt", "mgu")  # asked by name: mgu need not be in the catalogue
    assert reason is not None and "'mgu'" in reason and "jax.scan" in reason
    for cell in ("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before"):
        assert backends.unsupported_reason("bptt", RNNSpec(cell, 2, 3), lengths=True, dtype="float32") is None
