"""rnnbench.jax's declarations (one per backend: what the registry used to hard-code), its cell
objects, and the module-level `rnnbench.core.adapter.FrameworkAdapter` functions of `rnnbench.jax.adapter`.
The layout both packages share is tests/cross/test_layout.py's.
"""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("jax")

import rnnbench.jax  # noqa: E402
from rnnbench.core import precision, registry  # noqa: E402
from rnnbench.jax import adapter, backends  # noqa: E402
from rnnbench.core.adapter import FrameworkAdapter  # noqa: E402
from rnnbench.measure.timing import best_call_seconds  # noqa: E402
from rnnbench.core.capabilities import ANY_CELL  # noqa: E402


def test_declarations_are_what_the_registry_hard_coded():
    expected = {
        "naive": dict(cells=("lstm", "gru"), proj_size=True),
        "flax_nnx": dict(cells=("lstm", "gru"), proj_size=False),
        "flax_linen": dict(cells=("lstm", "gru"), proj_size=False),
        "scan": dict(cells=ANY_CELL, proj_size=True),
        "bptt": dict(cells=("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before"), proj_size=True),
        "cudnn": dict(cells=("lstm",), proj_size=False, dtypes=("float32",), devices=("cuda",)),
    }
    assert backends.BACKENDS == registry.keys("jax")  # the ladder: the registry's order
    assert [b for b in backends.BACKENDS if b in expected] == list(expected)  # a new rung adds to it
    for name, want in expected.items():
        caps = backends.capabilities(name)
        assert caps is backends.MODULES[name].CAPABILITIES
        assert adapter.get_adapter(name).capabilities is caps
        got = dict(cells=caps.cells, proj_size=caps.proj_size, dtypes=caps.dtypes, devices=caps.devices)
        assert got == {"dtypes": precision.ALL, "devices": ("cpu", "cuda"), **want}, name
        assert caps.lengths and caps.bidirectional
    for name in backends.BACKENDS:
        caps = backends.capabilities(name)
        assert (name in backends.PROJ_BACKENDS) == caps.proj_size, name
        assert (name in backends.CUSTOM_CELL_BACKENDS) == (caps.cells == ANY_CELL), name
    assert {"naive", "scan", "bptt"} <= set(backends.PROJ_BACKENDS) and "scan" in backends.CUSTOM_CELL_BACKENDS


def test_every_cell_is_a_cell_object():
    from rnnbench.core.catalogue import CELL_DEFS, get_cell

    for name in ("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before"):
        cell = rnnbench.jax.cells.get_jax_cell(name)
        assert cell.defn is get_cell(name) is CELL_DEFS[name] and cell.name == name
        assert cell.has_cell_state == get_cell(name).has_cell_state


def test_framework_adapter_functions():
    assert isinstance(adapter, FrameworkAdapter)
    assert adapter.available_backends("cpu") == tuple(b for b in backends.BACKENDS if b not in ("cudnn", "pallas"))
    assert adapter.trainer() is importlib.import_module("rnnbench.jax.train")
    assert {"jax", "jaxlib", "flax", "optax"} <= set(adapter.versions())
    adapter.reset_peak_memory("cpu")
    assert adapter.peak_memory_bytes("cpu") is None
    adapter.set_threads(3)
    assert adapter.recorded_threads == 3
    with pytest.raises(ValueError, match="threads"):
        adapter.set_threads(0)
    rates = adapter.gemm_gflops(16, 8, 12, timer=best_call_seconds, device="cpu", min_time=0.001)
    assert set(rates) == {"xla"} and rates["xla"] > 0
    chained = adapter.gemm_gflops(4, 8, 24, timer=best_call_seconds, device="cpu", min_time=0.001, steps=5)
    assert set(chained) == {"xla", "chain"} and chained["chain"] > 0
