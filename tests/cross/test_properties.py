"""Property-based cross-checks beyond the shared vectors (hypothesis, bounded and derandomized).

Random configurations (cell, sizes, layers, bidirectional, batch_first, bias, proj_size,
lengths, initial state, dtype) and random inputs and cotangents; every available torch
backend and a JAX impl are compared with the float64 reference (and so with each other),
forward and every gradient, with the tolerance of `rnnbench.core.tolerances`.

With variable lengths, x past each sequence's length is filled with large garbage: an
implementation that lets padding leak into its states or outputs disagrees with the
reference, which ignores it (and its gradient there must be exactly zero).

Cost control (2 shared cores): torch.compile is left out (it recompiles for every
example; the parity matrix covers it), and each example runs one JAX impl drawn by
hypothesis from the available ones (each compiles anew per configuration, 1-10 s), so
over the examples every JAX impl meets several configurations.  `derandomize=True`
makes the examples the same on every run (CI is deterministic).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from rnnbench import parity, reference
from rnnbench.core import registry
from rnnbench.core.params import init_params
from rnnbench.core.spec import RNNSpec
from rnnbench.core.tolerances import assert_close

FULL_PRECISION = ("float64", "float32")  # reduced precision has its own tests

EXCLUDED = {"torch.compile": "recompiles for every example; covered by the parity matrix",
            "torch.scan": "recompiles for every example; covered by the parity matrix"}
AVAILABLE = [n for n in registry.available("cpu") if n not in EXCLUDED]
TORCH = [n for n in AVAILABLE if n.startswith("torch.")]
JAX = [n for n in AVAILABLE if n.startswith("jax.")]
PROFILE = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


@st.composite
def configurations(draw):
    cell = draw(st.sampled_from(["lstm", "gru"]))
    hidden = draw(st.integers(1, 4))
    proj = draw(st.integers(0, hidden - 1)) if cell == "lstm" and hidden > 1 and draw(st.booleans()) else 0
    spec = RNNSpec(cell, draw(st.integers(1, 4)), hidden, num_layers=draw(st.integers(1, 2)),
                   bias=draw(st.booleans()), batch_first=draw(st.booleans()), bidirectional=draw(st.booleans()),
                   proj_size=proj)
    T, B = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    lengths = None
    if draw(st.booleans()):
        lengths = np.array(draw(st.lists(st.integers(1, T), min_size=B, max_size=B)), dtype=np.int64)
    return dict(spec=spec, T=T, B=B, lengths=lengths, initial_state=draw(st.booleans()),
                seed=draw(st.integers(0, 2**31 - 1)), dtype=draw(st.sampled_from(FULL_PRECISION)),
                jax_impl=draw(st.sampled_from(JAX)) if JAX else None)


def make_inputs(spec, T, B, lengths, initial_state, seed):
    rng = np.random.default_rng(seed)
    params = init_params(spec, rng)
    x = rng.standard_normal((T, B, spec.input_size))
    if lengths is not None:  # garbage past each length: must be ignored
        x[np.arange(T)[:, None] >= lengths[None, :]] = 1e3
    if spec.batch_first:
        x = np.ascontiguousarray(x.transpose(1, 0, 2))
    shapes = spec.state_shapes(B)
    h0 = rng.standard_normal(shapes["h"]) if initial_state else None
    c0 = rng.standard_normal(shapes["c"]) if initial_state and spec.cell == "lstm" else None
    probe = reference.run_case(spec, params, x, h0, c0, lengths)
    cot = {k: rng.standard_normal(v.shape) for k, v in probe.items()}
    return dict(params=params, x=x, h0=h0, c0=c0, lengths=lengths), cot


class _Case:  # what parity.unsupported_reason reads
    def __init__(self, spec, lengths):
        self.spec, self.lengths = spec, lengths


@pytest.mark.skipif(not AVAILABLE, reason="no implementation available here")
@PROFILE
@given(configurations())
def test_random_configurations_match_the_reference(cfg):
    spec, dtype = cfg["spec"], cfg["dtype"]
    inputs, cot = make_inputs(spec, cfg["T"], cfg["B"], cfg["lengths"], cfg["initial_state"], cfg["seed"])
    expected = reference.run_case(spec, inputs["params"], inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"],
                                  cot)
    if cfg["lengths"] is not None:  # the reference's own promise that padding is ignored
        gx = expected["grad/x"] if not spec.batch_first else expected["grad/x"].transpose(1, 0, 2)
        assert np.all(gx[np.arange(cfg["T"])[:, None] >= cfg["lengths"][None, :]] == 0)
    note(f"{spec} T={cfg['T']} B={cfg['B']} lengths={cfg['lengths']} dtype={dtype}")
    ran = []
    for impl in TORCH + ([cfg["jax_impl"]] if cfg["jax_impl"] else []):
        if parity.unsupported_reason(impl, _Case(spec, cfg["lengths"]), dtype) is not None:
            continue
        got = registry.get(impl).adapter().run_case(spec, cotangents=cot, dtype=dtype, **inputs)
        assert_close(expected, got, dtype, context=f"{impl} on {spec}, T={cfg['T']}, B={cfg['B']}, "
                                                   f"lengths={cfg['lengths']}, initial_state={cfg['initial_state']}",
                     spec=spec, x=inputs["x"])
        ran.append(impl)
    note(f"ran: {ran}")
    assert ran, "no implementation supports this configuration"  # native and the reference support all


def test_the_strategy_covers_the_features():
    """The bounded example budget still reaches every feature (checked on the drawn examples)."""
    seen = set()

    @PROFILE
    @given(configurations())
    def collect(cfg):
        s = cfg["spec"]
        seen.update(k for k, on in [("gru", s.cell == "gru"), ("lstm", s.cell == "lstm"), ("proj", s.proj_size),
                                    ("bidir", s.bidirectional), ("layers2", s.num_layers == 2),
                                    ("batch_first", s.batch_first), ("no_bias", not s.bias),
                                    ("lengths", cfg["lengths"] is not None), ("state", cfg["initial_state"]),
                                    ("float32", cfg["dtype"] == "float32"), ("float64", cfg["dtype"] == "float64")]
                    if on)
        if cfg["jax_impl"]:
            seen.add(cfg["jax_impl"])

    collect()
    # every feature is drawn; which JAX impls get drawn is left to chance (20 examples over
    # len(JAX) impls), so each one also gets the seeded all-features case below
    wanted = {"gru", "lstm", "proj", "bidir", "layers2", "batch_first", "no_bias", "lengths", "state", "float32",
              "float64"}
    assert wanted <= seen, f"never drawn: {sorted(wanted - seen)}"


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("jax_impl", JAX)
def test_every_jax_impl_on_a_seeded_all_features_configuration(jax_impl, cell):
    """Every JAX impl, whatever hypothesis drew: 2 layers, bidirectional, batch_first, unsorted lengths
    with garbage padding, initial states, float64; forward and every gradient vs the reference."""
    spec = RNNSpec(cell, 3, 4, num_layers=2, batch_first=True, bidirectional=True)
    lengths = np.array([4, 1, 3], dtype=np.int64)
    inputs, cot = make_inputs(spec, 4, 3, lengths, True, seed=7)
    case = _Case(spec, lengths)
    reason = parity.unsupported_reason(jax_impl, case, "float64")
    if reason is not None:
        pytest.skip(reason)
    expected = reference.run_case(spec, inputs["params"], inputs["x"], inputs["h0"], inputs["c0"], lengths, cot)
    got = registry.get(jax_impl).adapter().run_case(spec, cotangents=cot, dtype="float64", **inputs)
    assert_close(expected, got, "float64", context=f"{jax_impl} on {spec}", spec=spec, x=inputs["x"])
