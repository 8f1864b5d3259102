"""Every available rnnbench.torch backend against nn.LSTM / nn.GRU on a seeded grid.

Forward (output, h_n, c_n) and the gradients of x, h0, c0 and every parameter under a
random cotangent loss, in float64 and float32, each array within twice the derived bound of
`rnnbench.core.tolerances` (both sides round: nn.LSTM is not the float64 reference),
including PackedSequence input with unsorted lengths.  The torch.compile rungs (`compile`,
`scan`) run on two tiny configurations only (each new configuration costs a compile).  The shared vectors are
checked for every backend by tests/cross/test_parity_matrix.py through rnnbench.torch.adapter.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import rnnbench.torch
from rnnbench.core.spec import RNNSpec
from rnnbench.core.tolerances import tolerance

ATOL_F64 = 1e-10  # float64 against float64 on tiny cases: summation order only

# (cell, constructor kwargs, packed lengths or None, pass hx)
GRID = [
    ("lstm", dict(input_size=3, hidden_size=5), None, True),
    ("lstm", dict(input_size=4, hidden_size=6, num_layers=2, bidirectional=True, batch_first=True), [3, 6, 1, 4], True),
    ("lstm", dict(input_size=3, hidden_size=6, num_layers=2, bidirectional=True, bias=False, proj_size=4), [2, 5, 5], True),
    ("lstm", dict(input_size=2, hidden_size=4, num_layers=3, batch_first=True), None, False),
    ("gru", dict(input_size=3, hidden_size=5, num_layers=2, batch_first=True), None, False),
    ("gru", dict(input_size=4, hidden_size=5, bidirectional=True, bias=False), [4, 1, 6, 2], True),
    ("gru", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True), [5, 3, 5], True),
]
# compile, scan: one configuration per dtype (each costs a compile): LSTM with unsorted lengths,
# bidirectional, projection, no bias in float64; a plain two-layer GRU in float32.
COMPILE_GRID = {torch.float64: [GRID[2]], torch.float32: [GRID[4]]}
COMPILED = rnnbench.torch.backends.COMPILED_BACKENDS
SEQ_LEN = 6


def _backends():
    for backend in rnnbench.torch.BACKENDS:
        reason = rnnbench.torch.unavailable_reason(backend, "cpu")
        marks = [pytest.mark.skip(reason=f"{backend} unavailable here: {reason}")] if reason else []
        yield pytest.param(backend, id=backend, marks=marks)


def _grid(backend, dtype):
    grid = COMPILE_GRID[dtype] if backend in COMPILED else GRID
    for cell, kw, lengths, with_hx in grid:
        if kw.get("proj_size") and backend not in rnnbench.torch.PROJ_BACKENDS:
            continue
        yield cell, kw, lengths, with_hx


def run(module, cell, kw, x, hx, lengths, cot):
    """Forward + backward of sum(cot * outputs); returns outputs and gradients."""
    batch_first = kw.get("batch_first", False)
    states_in = [] if hx is None else ([hx] if cell == "gru" else list(hx))
    inputs = [x] + states_in
    if lengths is None:
        out, hidden = module(x, hx)
    else:
        packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first, enforce_sorted=False)
        out, hidden = module(packed, hx)
        out, _ = pad_packed_sequence(out, batch_first=batch_first, total_length=SEQ_LEN)
    states = list(hidden) if cell == "lstm" else [hidden]
    results = [out] + states
    loss = sum((r * c).sum() for r, c in zip(results, cot))
    params = list(module.parameters())
    grads = torch.autograd.grad(loss, inputs + params)
    return [r.detach() for r in results] + list(grads)


def check_against_nn(backend, cell, kw, lengths, with_hx, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ref = (nn.LSTM if cell == "lstm" else nn.GRU)(**kw, dtype=dtype)
    ours = (rnnbench.torch.LSTM if cell == "lstm" else rnnbench.torch.GRU)(**kw, dtype=dtype, backend=backend)
    ours.load_state_dict(ref.state_dict())
    B = 4 if lengths is None else len(lengths)
    I, H = kw["input_size"], kw["hidden_size"]
    H_out = kw.get("proj_size") or H
    D = 2 if kw.get("bidirectional") else 1
    L = kw.get("num_layers", 1)
    shape = (B, SEQ_LEN, I) if kw.get("batch_first") else (SEQ_LEN, B, I)

    def randn(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float64).to(dtype)

    x = randn(*shape)
    hx = None
    if with_hx:
        hx = (randn(L * D, B, H_out), randn(L * D, B, H)) if cell == "lstm" else randn(L * D, B, H_out)
    out_shape = shape[:2] + (D * H_out,)
    cot = [randn(*out_shape), randn(L * D, B, H_out)] + ([randn(L * D, B, H)] if cell == "lstm" else [])

    def fresh():
        xx = x.clone().requires_grad_()
        if hx is None:
            return xx, None
        if cell == "lstm":
            return xx, tuple(h.clone().requires_grad_() for h in hx)
        return xx, hx.clone().requires_grad_()

    expected = run(ref, cell, kw, *fresh(), lengths, cot)
    got = run(ours, cell, kw, *fresh(), lengths, cot)
    names = ["output"] + (["h_n", "c_n"] if cell == "lstm" else ["h_n"]) + ["grad/x"]
    if hx is not None:
        names += ["grad/h0", "grad/c0"] if cell == "lstm" else ["grad/h0"]
    names += [f"grad/{n}" for n, _ in ref.named_parameters()]
    assert len(names) == len(expected) == len(got)
    spec = RNNSpec(cell, **kw)
    dname = str(dtype).removeprefix("torch.")
    errors = {n: (e - g).abs().max().item() for n, e, g in zip(names, expected, got)}
    limits = {n: 2 * tolerance(dname, spec, SEQ_LEN, B, n, e.abs().max().item()) for n, e in zip(names, expected)}
    bad = {n: (err, limits[n]) for n, err in errors.items() if not err <= limits[n]}
    assert not bad, f"{backend} {cell} {kw} lengths={lengths} {dtype}: {bad}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("backend", list(_backends()))
def test_backend_matches_nn_forward_and_gradients(backend, dtype):
    if backend == "scan" and dtype == torch.float32:
        pytest.skip("scan's float32 is the parity matrix's (its compile per configuration is the longest)")
    for k, (cell, kw, lengths, with_hx) in enumerate(_grid(backend, dtype)):
        check_against_nn(backend, cell, kw, lengths, with_hx, dtype, seed=k)


@pytest.mark.parametrize("backend", list(_backends()))
def test_training_mode_dropout_one_matches_nn(backend):
    # dropout=1.0 zeroes every layer input after the first: deterministic in training mode.
    kw = dict(input_size=3, hidden_size=4, num_layers=2, dropout=1.0)
    torch.manual_seed(0)
    ref = nn.GRU(**kw, dtype=torch.float64).train()
    ours = rnnbench.torch.GRU(**kw, dtype=torch.float64, backend=backend).train()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    for a, b in zip(ref(x), ours(x)):
        torch.testing.assert_close(b, a, atol=ATOL_F64, rtol=0)


def test_cell_loop_is_bitwise_a_literal_lstmcell_loop():
    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 5)
    ours = rnnbench.torch.LSTM(3, 5, backend="cell_loop")
    ours.load_state_dict({f"{k}_l0": v for k, v in cell.state_dict().items()})
    x = torch.randn(6, 2, 3)
    h = c = torch.zeros(2, 5)
    outs = []
    for t in range(6):
        h, c = cell(x[t], (h, c))
        outs.append(h)
    out, (h_n, c_n) = ours(x)
    assert torch.equal(out, torch.stack(outs)) and torch.equal(h_n[0], h) and torch.equal(c_n[0], c)


def test_jit_backend_runs_torchscript():
    if rnnbench.torch.unavailable_reason("jit") is not None:
        pytest.skip(rnnbench.torch.unavailable_reason("jit"))
    from rnnbench.torch.backends import jit
    for name in jit.DIRECTIONS:
        assert isinstance(jit.scripted(name), torch.jit.ScriptFunction)


def test_compile_does_not_recompile_for_a_repeated_configuration():
    if rnnbench.torch.unavailable_reason("compile") is not None:
        pytest.skip(rnnbench.torch.unavailable_reason("compile"))
    from torch._dynamo.utils import counters
    from rnnbench.torch.backends import compile as compiled

    def cached():
        return sum(len(steps) for steps in compiled._steps.values())

    module = rnnbench.torch.GRU(3, 5, num_layers=2, batch_first=True, backend="compile")  # as in COMPILE_GRID
    x = torch.randn(4, SEQ_LEN, 3, requires_grad=True)
    module(x)[0].sum().backward()  # compiles if the grid has not already
    graphs, before = counters["stats"]["unique_graphs"], cached()
    out, _ = module(torch.randn(4, 2 * SEQ_LEN, 3, requires_grad=True))  # longer T: same step graph
    out.sum().backward()
    assert counters["stats"]["unique_graphs"] == graphs and cached() == before


def test_bptt_backend_present_and_its_earlier_name_unknown():
    assert "bptt" in rnnbench.torch.available_backends()
    with pytest.raises(rnnbench.torch.UnknownBackendError, match="unknown backend 'autograd'"):
        rnnbench.torch.LSTM(3, 4, backend="autograd")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("backend", [b for b in rnnbench.torch.BACKENDS if b != "native"])
def test_backend_on_cuda_matches_native_on_cuda(backend):
    reason = rnnbench.torch.unavailable_reason(backend, "cuda")
    if reason is not None:
        pytest.skip(reason)
    grid = COMPILE_GRID[torch.float64] if backend in COMPILED else GRID[:3] + GRID[5:]
    for cell, kw, lengths, with_hx in grid:
        if kw.get("proj_size") and backend not in rnnbench.torch.PROJ_BACKENDS:
            continue
        torch.manual_seed(0)
        ref = (rnnbench.torch.LSTM if cell == "lstm" else rnnbench.torch.GRU)(**kw, dtype=torch.float64, device="cuda",
                                                                       backend="native")
        ours = (rnnbench.torch.LSTM if cell == "lstm" else rnnbench.torch.GRU)(**kw, dtype=torch.float64, device="cuda",
                                                                        backend=backend)
        ours.load_state_dict(ref.state_dict())
        B = 4 if lengths is None else len(lengths)
        shape = (B, SEQ_LEN, kw["input_size"]) if kw.get("batch_first") else (SEQ_LEN, B, kw["input_size"])
        x = torch.randn(*shape, dtype=torch.float64, device="cuda")
        lens = None if lengths is None else torch.tensor(lengths)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_a, _ = ref(xa, lengths=lens)
        out_b, _ = ours(xb, lengths=lens)
        torch.testing.assert_close(out_b, out_a, atol=1e-9, rtol=0)
        ga = torch.autograd.grad(out_a.pow(2).sum(), [xa] + list(ref.parameters()))
        gb = torch.autograd.grad(out_b.pow(2).sum(), [xb] + list(ours.parameters()))
        for a, b in zip(ga, gb):
            torch.testing.assert_close(b, a, atol=1e-9, rtol=0)


def test_native_lstm_trains_under_cpu_autocast_float16_on_every_cpu():
    """PyTorch 2.13 routes an LSTM under CPU autocast float16 with gradients to oneDNN on CPUs with
    AVX512-FP16, where oneDNN has no such primitive and nn.LSTM raises; `native` runs ATen's kernel
    there, the one other CPUs run, so it trains in this mode everywhere with the same result.  A CPU
    without float16 arithmetic refuses float16 on every rung (it would emulate it in float32)."""
    from rnnbench.core.capabilities import UnsupportedConfigError
    from rnnbench.core.precision import cpu_has_float16

    torch.manual_seed(0)
    ref = nn.LSTM(4, 5, num_layers=2)
    ours = rnnbench.torch.LSTM(4, 5, num_layers=2, backend="native")
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(6, 3, 4)
    if not cpu_has_float16():
        with torch.autocast("cpu", dtype=torch.float16), pytest.raises(UnsupportedConfigError, match="float16 arithmetic"):
            ours(x)
        return
    with torch.autocast("cpu", dtype=torch.float16):
        out, (h, c) = ours(x)
        (out.float().sum() + h.float().sum() + c.float().sum()).backward()
    grads = [p.grad for p in ours.parameters()]
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)

    torch._C._set_mkldnn_enabled(False)  # nn.LSTM on ATen's kernel: what a CPU without AVX512-FP16 runs
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            want, (wh, wc) = ref(x)
            (want.float().sum() + wh.float().sum() + wc.float().sum()).backward()
    finally:
        torch._C._set_mkldnn_enabled(True)
    torch.testing.assert_close(out, want, atol=0, rtol=0)
    for g, p in zip(grads, ref.parameters()):
        torch.testing.assert_close(g, p.grad, atol=0, rtol=0)
    assert torch._C._get_mkldnn_enabled(), "the rung restores oneDNN after its call"
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():  # where PyTorch takes oneDNN, nn.LSTM itself fails
        with torch.autocast("cpu", dtype=torch.float16), pytest.raises(RuntimeError, match="primitive descriptor"):
            ref(x)[0].float().sum().backward()
