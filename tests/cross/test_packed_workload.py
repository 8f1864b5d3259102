"""The realistic workload (R1: packed, 2 layers, bidirectional) runs on the real adapters and
computes the packed model: its forward output and its train step's gradients equal the
float64 reference's on the same parameters, inputs and lengths, within the float32 bound."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from rnnbench import reference
from rnnbench.core.params import init_params
from rnnbench.measure import workloads
from rnnbench.core.tolerances import tolerance

TINY = workloads.Workload("tiny-packed", seq_len=6, batch=3, input_size=4, hidden_size=5, num_layers=2,
                          bidirectional=True, packed=True)
SEED = 0


def _inputs(spec):
    """The parameters and input a workload builds from SEED (the same draws, in the same order)."""
    rng = np.random.default_rng(SEED)
    params = init_params(spec, rng)
    x = rng.standard_normal((TINY.seq_len, TINY.batch, spec.input_size))
    return params, x


def _torch_results(adapter, spec, lengths):
    import torch
    from torch.nn.utils.rnn import pad_packed_sequence

    wl = adapter.make_workload(spec, seq_len=TINY.seq_len, batch=TINY.batch, lengths=lengths, seed=SEED)
    wl.forward()
    with torch.no_grad():
        packed, _ = wl._run()
    output = pad_packed_sequence(packed, total_length=TINY.seq_len)[0].double().numpy()
    wl.train_step()  # loss: sum of the packed output and of every final state
    grads = {f"grad/{n}": p.grad.double().numpy() for n, p in wl.module.named_parameters()}
    grads["grad/x"] = wl.x.grad.double().numpy()
    return output, grads, "sum"


def _jax_results(adapter, spec, lengths):
    wl = adapter.make_workload(spec, seq_len=TINY.seq_len, batch=TINY.batch, lengths=lengths, seed=SEED)
    wl.forward()
    output = np.asarray(wl._forward(wl.x, wl.params, wl.lengths), dtype=np.float64)
    wl.train_step()  # loss: <output, g>
    _, (gparams, gx) = wl._step(wl.params, wl.x, wl.g, wl.lengths)
    grads = {f"grad/{n}": np.asarray(g, dtype=np.float64) for n, g in gparams.items()}
    grads["grad/x"] = np.asarray(gx, dtype=np.float64)
    return output, grads, np.asarray(wl.g, dtype=np.float64)


@pytest.mark.parametrize("module,backend", [("rnnbench.torch.adapter", "eager"), ("rnnbench.torch.adapter", "native"),
                                            ("rnnbench.jax.adapter", "scan")])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_packed_workloads_compute_the_packed_model(module, backend, cell):
    pytest.importorskip(module.split(".")[1])
    adapter = importlib.import_module(module).get_adapter(backend)
    spec = TINY.spec(cell)
    lengths = np.asarray(TINY.lengths(0))
    assert lengths.min() < TINY.seq_len, "the lengths must vary, or nothing is packed"
    run = _torch_results if module.startswith("rnnbench.torch") else _jax_results
    output, grads, loss = run(adapter, spec, lengths)

    params, x = _inputs(spec)
    want = reference.forward(spec, params, x, lengths=lengths)
    valid = np.arange(TINY.seq_len)[:, None] < lengths[None, :]  # (T, B)
    if isinstance(loss, str):  # torch: d(sum of packed output + final states)
        cot = {"output": np.where(valid[..., None], 1.0, 0.0) * np.ones_like(want.output),
               "h_n": np.ones_like(want.h_n)}
        if spec.family == "lstm":
            cot["c_n"] = np.ones_like(want.c_n)
    else:  # jax: d<output, g>
        cot = {"output": loss, "h_n": np.zeros_like(want.h_n)}
        if spec.family == "lstm":
            cot["c_n"] = np.zeros_like(want.c_n)
    want_grads = reference.backward(spec, want, cot)

    def check(key, got, expected):
        bound = tolerance("float32", spec, TINY.seq_len, TINY.batch, key, float(np.max(np.abs(expected))))
        err = float(np.max(np.abs(got - expected)))
        assert err <= bound, f"{backend} {cell}: {key} is off by {err:.3g} (bound {bound:.3g})"

    assert np.all(output[~valid] == 0), "past each length the packed output is zero"
    check("output", output, want.output)
    names = [k for k in want_grads if k.startswith("grad/") and k not in ("grad/h0", "grad/c0")]
    assert set(names) == set(grads), (sorted(names), sorted(grads))
    for key in names:
        check(key, grads[key], want_grads[key])
