"""The realistic workload (R1: packed, 2 layers, bidirectional) runs on the real adapters."""

from __future__ import annotations

import importlib

import pytest

from shared.study import workloads

TINY = workloads.Workload("tiny-packed", seq_len=6, batch=3, input_size=4, hidden_size=5, num_layers=2,
                          bidirectional=True, packed=True)


@pytest.mark.parametrize("module,backend", [("torch_impl.adapter", "eager"), ("torch_impl.adapter", "native"),
                                            ("jax_impl.adapter", "scan")])
def test_packed_workloads_run_on_the_adapters(module, backend):
    pytest.importorskip(module.split(".")[0])
    adapter = importlib.import_module(module).get_adapter(backend)
    for cell in ("lstm", "gru"):
        wl = adapter.make_workload(TINY.spec(cell), seq_len=6, batch=3, lengths=TINY.lengths(0))
        wl.forward()
        wl.train_step()
