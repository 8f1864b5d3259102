"""rnnbench.torch's declarations (one per backend, next to its code: what the registry used to
hard-code), its cell objects, aliases, and the module-level `rnnbench.core.adapter.FrameworkAdapter`
functions of `rnnbench.torch.adapter`.  The layout both packages share is tests/cross/test_layout.py's.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import rnnbench.torch
from rnnbench.measure.timing import best_call_seconds
from rnnbench.core import registry
from rnnbench.core.adapter import FrameworkAdapter
from rnnbench.core.capabilities import ANY_CELL
from rnnbench.core.catalogue import CUSTOM_CELLS, STANDARD_CELLS, get_cell
from rnnbench.torch import adapter, backends


def test_declarations_are_what_the_registry_hard_coded():
    expected = {
        "naive": dict(cells=STANDARD_CELLS, proj_size=False),
        "cell_loop": dict(cells=STANDARD_CELLS, proj_size=False),
        "jit": dict(cells=STANDARD_CELLS, proj_size=True),
        "eager": dict(cells=ANY_CELL, proj_size=True),
        "compile": dict(cells=ANY_CELL, proj_size=True),
        "scan": dict(cells=ANY_CELL, proj_size=True),
        "bptt": dict(cells=("lstm", "gru", "peephole_lstm", "ln_lstm"), proj_size=True),
        "native": dict(cells=STANDARD_CELLS, proj_size=True),
    }
    assert backends.BACKENDS == registry.keys("torch")  # the ladder: the registry's order
    assert [b for b in backends.BACKENDS if b in expected] == list(expected)  # a new rung adds to it
    for name, want in expected.items():
        caps = backends.capabilities(name)
        assert caps is backends.MODULES[name].CAPABILITIES
        assert adapter.get_adapter(name).capabilities is caps
        assert dict(cells=caps.cells, proj_size=caps.proj_size) == want, name
    for name in backends.BACKENDS:
        caps = backends.capabilities(name)
        assert (name in backends.PROJ_BACKENDS) == caps.proj_size, name
        assert (name in backends.CUSTOM_CELL_BACKENDS) == (caps.cells == ANY_CELL), name
    assert {"jit", "eager", "compile", "scan", "bptt", "native"} <= set(backends.PROJ_BACKENDS)
    assert {"eager", "compile", "scan"} <= set(backends.CUSTOM_CELL_BACKENDS)
    assert backends.COMPILED_BACKENDS == ("compile", "scan")


def test_the_earlier_name_of_bptt_is_unknown():
    for ask in (adapter.get_adapter, rnnbench.torch.capabilities):
        with pytest.raises(backends.UnknownBackendError, match="unknown backend 'autograd'"):
            ask("autograd")


def test_every_cell_is_a_cell_object():
    for name in STANDARD_CELLS + CUSTOM_CELLS:
        cell = rnnbench.torch.cells.get_torch_cell(name)
        assert cell.defn is get_cell(name) and cell.name == name
        assert cell.has_cell_state == get_cell(name).has_cell_state


def test_framework_adapter_functions():
    assert isinstance(adapter, FrameworkAdapter)
    assert adapter.available_backends("cpu") == rnnbench.torch.available_backends("cpu")
    assert adapter.trainer() is importlib.import_module("rnnbench.torch.train")
    assert adapter.versions() == {"torch": torch.__version__}
    adapter.reset_peak_memory("cpu")
    assert adapter.peak_memory_bytes("cpu") is None
    threads = torch.get_num_threads()
    try:
        adapter.set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    rates = adapter.gemm_gflops(16, 8, 12, timer=best_call_seconds, device="cpu", min_time=0.001)
    assert set(rates) == {"torch.mm", "onednn"} and rates["torch.mm"] > 0
    chained = adapter.gemm_gflops(4, 8, 24, timer=best_call_seconds, device="cpu", min_time=0.001, steps=5)
    assert set(chained) == {"torch.mm", "onednn", "chain"} and chained["chain"] > 0
    with pytest.raises(ValueError, match="dtype"):
        adapter.torch_dtype("int7")
