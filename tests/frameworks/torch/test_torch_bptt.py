"""The `autograd` rung's kernel, `rnnbench.torch.backends.bptt.lstm_gru`, on its own.

One layer, one direction, built directly on the canonical parameters of a single-layer
`nn.LSTM`/`nn.GRU`: gradcheck in float64, parity of outputs and every gradient with the
built-in modules (float64 and float32, oneDNN GEMM path on and off), the batched-GEMM
structure of the backward, and errors on bad input.  The full modules (layers,
directions, PackedSequence) are tested with the other backends.
"""

from __future__ import annotations

import pytest
import torch

from rnnbench.torch.backends.bptt.lstm_gru import run_kernel as run_direction
from rnnbench.torch.backends.bptt.gemm import (
    Gemm, onednn_unavailable_reason, tuned_choices, use_gemm_policy, use_onednn)

# nn.LSTM says so when proj_size makes it leave oneDNN; expected here, not a problem.
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")

CONFIGS = [  # (cell, proj_size, bias)
    ("lstm", 0, True), ("lstm", 0, False), ("lstm", 2, True), ("lstm", 2, False),
    ("gru", 0, True), ("gru", 0, False),
]
CONFIG_IDS = [f"{c}-proj{p}-{'bias' if b else 'nobias'}" for c, p, b in CONFIGS]
T, B, I, H = 5, 4, 3, 4
# unsorted, with a length-1 and a full-length sequence
LENGTHS = [3, T, 1, 4]


def make_module(cell, proj, bias, dtype, seed=0):
    torch.manual_seed(seed)
    if cell == "lstm":
        return torch.nn.LSTM(I, H, bias=bias, proj_size=proj, dtype=dtype)
    return torch.nn.GRU(I, H, bias=bias, dtype=dtype)


def layer_params(module):
    p = dict(module.named_parameters())
    return [p["weight_ih_l0"], p["weight_hh_l0"], p.get("bias_ih_l0"), p.get("bias_hh_l0"), p.get("weight_hr_l0")]


def inputs(cell, proj, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, I, dtype=dtype, generator=g).requires_grad_()
    h0 = torch.randn(B, proj or H, dtype=dtype, generator=g).requires_grad_()
    c0 = torch.randn(B, H, dtype=dtype, generator=g).requires_grad_() if cell == "lstm" else None
    return x, h0, c0


def native_run(module, cell, x, h0, c0, lengths):
    hx = (h0[None], c0[None]) if cell == "lstm" else h0[None]
    if lengths is None:
        out, state = module(x, hx)
    else:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, state = module(packed, hx)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
    h_n, c_n = state if cell == "lstm" else (state, None)
    return out, h_n[0], (c_n[0] if c_n is not None else None)


def loss_of(results, cotangents):
    return sum((r * c).sum() for r, c in zip(results, cotangents) if r is not None)


@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("cell,proj,bias", CONFIGS, ids=CONFIG_IDS)
def test_gradcheck_float64(cell, proj, bias, with_lengths):
    module = make_module(cell, proj, bias, torch.float64)
    params = [p.detach().clone().requires_grad_() if p is not None else None for p in layer_params(module)]
    x, h0, c0 = inputs(cell, proj, torch.float64)
    lengths = torch.tensor(LENGTHS) if with_lengths else None

    def fn(x, h0, c0, *weights):
        out, h_n, c_n = run_direction(cell, x, h0, c0, *weights, lengths)
        return (out, h_n) if c_n is None else (out, h_n, c_n)

    args = (x, h0, c0, *params)
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-7, rtol=1e-6)


# float64 always runs on BLAS (the oneDNN path is float32 only)
@pytest.mark.parametrize("dtype,atol,onednn", [(torch.float64, 1e-10, False), (torch.float32, 2e-5, True),
                                               (torch.float32, 2e-5, False)], ids=["f64", "f32-onednn", "f32-blas"])
@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("cell,proj,bias", CONFIGS, ids=CONFIG_IDS)
def test_matches_native(cell, proj, bias, with_lengths, dtype, atol, onednn):
    module = make_module(cell, proj, bias, dtype)
    x, h0, c0 = inputs(cell, proj, dtype)
    lengths = torch.tensor(LENGTHS) if with_lengths else None
    wrt = [t for t in [x, h0, c0, *layer_params(module)] if t is not None]

    expected = native_run(module, cell, x, h0, c0, lengths)
    g = torch.Generator().manual_seed(2)
    cotangents = [torch.randn(r.shape, dtype=dtype, generator=g) if r is not None else None for r in expected]
    expected_grads = torch.autograd.grad(loss_of(expected, cotangents), wrt)

    with use_onednn(onednn):
        got = run_direction(cell, x, h0, c0, *layer_params(module), lengths)
        got_grads = torch.autograd.grad(loss_of(got, cotangents), wrt)

    names = ["out", "h_n", "c_n"]
    for name, e, r in zip(names, expected, got):
        assert (e is None) == (r is None), name
        if e is not None:
            assert r.shape == e.shape and r.dtype == dtype, name
            torch.testing.assert_close(r, e, atol=atol, rtol=0, msg=lambda m: f"{name}: {m}")
    grad_names = ["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr"]
    grad_names = [n for n, t in zip(grad_names, [x, h0, c0, *layer_params(module)]) if t is not None]
    for name, e, r in zip(grad_names, expected_grads, got_grads):
        torch.testing.assert_close(r, e, atol=atol, rtol=0, msg=lambda m: f"grad {name}: {m}")


def test_padded_steps_have_zero_output_and_hold_state():
    module = make_module("lstm", 0, True, torch.float64)
    x, h0, c0 = inputs("lstm", 0, torch.float64)
    lengths = torch.tensor(LENGTHS)
    out, h_n, c_n = run_direction("lstm", x, h0, c0, *layer_params(module), lengths)
    for b, n in enumerate(LENGTHS):
        assert torch.all(out[n:, b] == 0)
        torch.testing.assert_close(h_n[b], out[n - 1, b], atol=0, rtol=0)
        # the state after the last valid step equals running only the valid prefix
        _, h_ref, c_ref = run_direction("lstm", x[:n, b:b + 1], h0[b:b + 1], c0[b:b + 1], *layer_params(module), None)
        torch.testing.assert_close(h_n[b], h_ref[0], atol=1e-12, rtol=0)
        torch.testing.assert_close(c_n[b], c_ref[0], atol=1e-12, rtol=0)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_no_grad_forward_equals_recording_forward(cell):
    module = make_module(cell, 0, True, torch.float32)
    x, h0, c0 = inputs(cell, 0, torch.float32)
    recorded = run_direction(cell, x, h0, c0, *layer_params(module), None)
    assert recorded[0].grad_fn is not None
    with torch.no_grad():
        plain = run_direction(cell, x, h0, c0, *layer_params(module), None)
    assert plain[0].grad_fn is None
    for a, b in zip(recorded, plain):
        if a is not None:
            torch.testing.assert_close(a.detach(), b, atol=0, rtol=0)


def test_missing_initial_state_means_zeros_and_noncontiguous_input():
    module = make_module("lstm", 0, True, torch.float64)
    x, _, _ = inputs("lstm", 0, torch.float64)
    x_bt = x.detach().transpose(0, 1).contiguous().transpose(0, 1)  # same values, (B, T) memory layout
    assert not x_bt.is_contiguous()
    zeros = torch.zeros(B, H, dtype=torch.float64)
    got = run_direction("lstm", x_bt, None, None, *layer_params(module), None)
    want = run_direction("lstm", x, zeros, zeros, *layer_params(module), None)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_backward_weight_gradients_are_batched_over_time(cell):
    """The backward's GEMM count grows by exactly one per step (the recurrent dG_t @ W_hh):
    dW_ih, dW_hh and dx are single GEMMs over all steps, whatever T is."""
    from torch.profiler import ProfilerActivity, profile
    gemm_ops = {"aten::mm", "aten::addmm", "aten::addmm_", "mkldnn::_linear_pointwise"}

    def backward_gemms(steps):
        module = make_module(cell, 0, True, torch.float32)
        x = torch.randn(steps, B, I, requires_grad=True)
        out, _, _ = run_direction(cell, x, None, None, *layer_params(module), None)
        loss = out.sum()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss.backward()
        return sum(e.count for e in prof.key_averages() if e.key in gemm_ops)

    with use_gemm_policy("onednn"):  # no first-call timing ("auto") inside the profile
        short, long = backward_gemms(3), backward_gemms(9)
    assert long - short == 6, (short, long)
    assert short <= 3 + 4  # per-step GEMMs + dx, dW_ih, dW_hh (2 calls: h0 and the rest)


def test_none_inputs_get_none_gradients():
    module = make_module("gru", 0, False, torch.float64)
    x, h0, _ = inputs("gru", 0, torch.float64)
    out, h_n, c_n = run_direction("gru", x, h0, None, *layer_params(module), None)
    assert c_n is None
    out.sum().backward()
    assert x.grad is not None and h0.grad is not None
    assert all(p.grad is not None for p in module.parameters())


# ---- oneDNN helper -------------------------------------------------------------------
@pytest.mark.parametrize("with_bias,with_add", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "blas"])
def test_gemm_matches_matmul(with_bias, with_add, onednn):
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(6, 5, generator=g), torch.randn(7, 5, generator=g)
    bias = torch.randn(6, generator=g) if with_bias else None
    add = torch.randn(7, 6, generator=g) if with_add else None
    want = x.double() @ w.double().t()
    if bias is not None:
        want = want + bias.double()
    if add is not None:
        want = want + add.double()
    with use_onednn(onednn):
        gemm = Gemm(w, batch_size=7)
        assert gemm.onednn == (onednn and onednn_unavailable_reason("cpu", torch.float32) is None)
        got = gemm(x, bias, add)
        out = torch.empty(7, 6)
        gemm(x, bias, add, out=out)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)
    torch.testing.assert_close(out, got, atol=0, rtol=0)


def test_gemm_auto_policy_times_once_and_agrees():
    g = torch.Generator().manual_seed(1)
    w, x, add = torch.randn(9, 11, generator=g), torch.randn(13, 11, generator=g), torch.randn(13, 9, generator=g)
    with use_gemm_policy("auto"):
        gemm = Gemm(w, batch_size=13)
        got = gemm(x, add=add)
        again = Gemm(w, batch_size=13)(x, add=add)
    assert gemm.path in ("onednn", "blas")
    if onednn_unavailable_reason("cpu", torch.float32) is None:
        assert tuned_choices()[(13, 11, 9, torch.float32, torch.get_num_threads(), False, True, False)] == gemm.path
    torch.testing.assert_close(got, x @ w.t() + add, atol=1e-5, rtol=0)
    torch.testing.assert_close(again, got, atol=0, rtol=0)
    with pytest.raises(ValueError, match="policy must be one of"):
        with use_gemm_policy("fastest"):
            pass


def test_gemm_auto_decision_needs_a_clear_margin():
    from rnnbench.torch.backends.bptt.gemm import decide

    assert decide({"onednn": [1.0, 0.5, 0.5], "blas": [1.0, 1.0, 1.0]}) == "onednn"
    assert decide({"onednn": [0.97] * 5, "blas": [1.0] * 5}) == "blas"  # a tie stays on BLAS
    # one noisy round cannot flip it: the median round decides
    assert decide({"onednn": [0.1, 1.2, 1.2, 1.2, 1.2], "blas": [1.0] * 5}) == "blas"
    assert decide({"onednn": [2.0, 0.5, 0.5, 0.5, 0.5], "blas": [1.0] * 5}) == "onednn"


@pytest.mark.skipif(onednn_unavailable_reason("cpu", torch.float32) is not None, reason="no oneDNN linear ops in this torch")
def test_gemm_auto_decision_is_cached_per_machine(tmp_path, monkeypatch):
    """The decision is made once per machine and shape: later processes (a fresh _TUNED) read it,
    another machine's fingerprint does not see it, and the timing is not repeated."""
    import json

    from rnnbench.torch.backends.bptt import gemm as gemm_mod

    monkeypatch.setenv("RNNBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gemm_mod, "_TUNED", {})
    timed = []

    def fake_times(self, x, bias, add, out):
        timed.append(x.shape)
        return {"onednn": [0.5] * 5, "blas": [1.0] * 5}

    monkeypatch.setattr(gemm_mod.Gemm, "_time_both", fake_times)
    w, x = torch.randn(6, 5), torch.randn(4, 5)
    with use_gemm_policy("auto"):
        assert Gemm(w, 4)(x).shape == (4, 6)
        monkeypatch.setattr(gemm_mod, "_TUNED", {})  # a new process
        g = Gemm(w, 4)
        g(x)
    assert g.path == "onednn" and len(timed) == 1
    data = json.loads((tmp_path / "gemm-choices.json").read_text())
    assert data == {gemm_mod.machine_fingerprint(): {f"4x5x6 float32 threads={torch.get_num_threads()} "
                                                     "bias=0 add=0 out=0": "onednn"}}
    monkeypatch.setattr(gemm_mod, "machine_fingerprint", lambda: "another machine")
    monkeypatch.setattr(gemm_mod, "_TUNED", {})
    with use_gemm_policy("auto"):
        Gemm(w, 4)(x)
    assert len(timed) == 2  # decided again there


def test_gemm_float64_uses_blas_and_reason_is_given():
    assert "float64" in onednn_unavailable_reason("cpu", torch.float64)
    assert Gemm(torch.randn(3, 2, dtype=torch.float64)).onednn is False
    with use_onednn(False):
        assert "switched off" in onednn_unavailable_reason("cpu", torch.float32)
    with pytest.raises(ValueError, match="2-D"):
        Gemm(torch.randn(3))


# ---- bad input -----------------------------------------------------------------------
def _lstm_args(**overrides):
    module = make_module("lstm", 0, True, torch.float32)
    x, h0, c0 = inputs("lstm", 0, torch.float32)
    w_ih, w_hh, b_ih, b_hh, w_hr = layer_params(module)
    args = dict(cell="lstm", x=x, h0=h0, c0=c0, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh, w_hr=w_hr, lengths=None)
    args.update(overrides)
    return args


@pytest.mark.parametrize("overrides,match", [
    (dict(cell="rnn"), "cell must be one of"),
    (dict(x=torch.randn(T, I)), "x must be a 3-D tensor"),
    (dict(x=torch.randn(T, B, I + 1)), r"w_ih has shape .* expected"),
    (dict(h0=torch.randn(B + 1, H)), r"h0 has shape"),
    (dict(c0=torch.randn(B, H + 1)), r"c0 has shape"),
    (dict(w_hh=torch.randn(4 * H + 1, H)), r"w_hh must be a 2-D tensor \(4\*hidden_size"),
    (dict(b_ih=torch.randn(3)), r"b_ih has shape"),
    (dict(h0=torch.randn(B, H, dtype=torch.float64)), r"h0 has dtype torch.float64"),
    (dict(lengths=torch.tensor([1, 2, 3])), r"lengths must be a tensor of shape"),
    (dict(lengths=torch.tensor([1, 2, 0, 3])), r"lengths must be in \[1, T=5\]"),
    (dict(lengths=torch.tensor([1, 2, 6, 3])), r"lengths must be in \[1, T=5\]"),
    (dict(lengths=torch.tensor([1, 2, 3, 4], dtype=torch.int32)), "lengths must be int64"),
    (dict(w_hr=torch.randn(H, H + 1)), r"w_hr has shape"),
])
def test_bad_input_names_the_problem(overrides, match):
    with pytest.raises((ValueError, TypeError), match=match):
        run_direction(**_lstm_args(**overrides))


def test_gru_rejects_lstm_only_arguments():
    module = make_module("gru", 0, True, torch.float32)
    x, h0, _ = inputs("gru", 0, torch.float32)
    with pytest.raises(ValueError, match="c0 must be None"):
        run_direction("gru", x, h0, torch.zeros(B, H), *layer_params(module), None)
    w_ih, w_hh, b_ih, b_hh, _ = layer_params(module)
    with pytest.raises(ValueError, match="only supported for cell='lstm'"):
        run_direction("gru", x, h0, None, w_ih, w_hh, b_ih, b_hh, torch.randn(H, H), None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cell,proj,bias", CONFIGS, ids=CONFIG_IDS)
def test_cuda_matches_native(cell, proj, bias):
    module = make_module(cell, proj, bias, torch.float64).cuda()
    x, h0, c0 = (t.detach().cuda().requires_grad_() if t is not None else None for t in inputs(cell, proj, torch.float64))
    lengths = torch.tensor(LENGTHS, device="cuda")
    wrt = [t for t in [x, h0, c0, *layer_params(module)] if t is not None]
    expected = native_run(module, cell, x, h0, c0, lengths.cpu())
    got = run_direction(cell, x, h0, c0, *layer_params(module), lengths)
    cot = [torch.ones_like(r) if r is not None else None for r in expected]
    for e, r in zip(torch.autograd.grad(loss_of(expected, cot), wrt), torch.autograd.grad(loss_of(got, cot), wrt)):
        torch.testing.assert_close(r, e, atol=1e-10, rtol=0)
    for e, r in zip(expected, got):
        if e is not None:
            torch.testing.assert_close(r, e, atol=1e-10, rtol=0)


def test_gemm_policy_from_environment(monkeypatch):
    from rnnbench.torch.backends.bptt.gemm import gemm_policy
    monkeypatch.delenv("RNNBENCH_GEMM", raising=False)
    assert gemm_policy() == "auto"  # decided on the machine that runs the code
    monkeypatch.setenv("RNNBENCH_GEMM", "onednn")
    assert gemm_policy() == "onednn"
    with use_gemm_policy("auto"):
        assert gemm_policy() == "auto"
    monkeypatch.setenv("RNNBENCH_GEMM", "fastest")
    with pytest.raises(ValueError, match="RNNBENCH_GEMM must be one of"):
        gemm_policy()


@pytest.mark.parametrize("cell,proj,bias", [("lstm", 2, True), ("gru", 0, True)], ids=["lstm-proj2", "gru"])
def test_each_gradient_asked_alone_equals_its_share_of_all(cell, proj, bias):
    """The backward computes what autograd asks for (ctx.needs_input_grad): with one input
    requiring grad, that one gradient comes out, equal to the one computed with all of them."""
    module = make_module(cell, proj, bias, torch.float64)
    weights = [p.detach().clone() if p is not None else None for p in layer_params(module)]
    x, h0, c0 = (t.detach() if t is not None else None for t in inputs(cell, proj, torch.float64))
    args = [x, h0, c0, *weights]
    lengths = torch.tensor(LENGTHS)
    g = torch.Generator().manual_seed(5)
    cot = [torch.randn(r.shape, dtype=torch.float64, generator=g) if r is not None else None
           for r in run_direction(cell, *args, lengths)]

    def grads(wanted):
        leaves = [a.clone().requires_grad_(i in wanted) if a is not None else None for i, a in enumerate(args)]
        loss_of(run_direction(cell, *leaves, lengths), cot).backward()
        return [leaf.grad if leaf is not None else None for leaf in leaves]

    present = [i for i, a in enumerate(args) if a is not None]
    every = grads(set(present))
    for i in present:
        alone = grads({i})
        torch.testing.assert_close(alone[i], every[i], rtol=0, atol=1e-12)
        assert all(alone[j] is None for j in present if j != i)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_double_backward_runs_through_the_recorded_layers(cell):
    """Under create_graph the kernel's backward hands over to the same layers recorded by
    autograd (`_recorded`): second derivatives pass gradgradcheck, lengths and biases included."""
    proj = 2 if cell == "lstm" else 0
    module = make_module(cell, proj, True, torch.float64)
    params = [p.detach().clone().requires_grad_() if p is not None else None for p in layer_params(module)]
    x, h0, c0 = inputs(cell, proj, torch.float64)
    lengths = torch.tensor(LENGTHS)

    def fn(x, h0, c0, *weights):
        out, h_n, c_n = run_direction(cell, x, h0, c0, *weights, lengths)
        return (out, h_n) if c_n is None else (out, h_n, c_n)

    args = tuple(a for a in (x, h0, c0, *params))
    assert torch.autograd.gradgradcheck(fn, args, eps=1e-6, atol=1e-6, rtol=1e-5)


# ---- gradients at odd sizes, one bias, the recorded path ----------------------------------
def _native_and_kernel_grads(cell, proj, x, h0, c0, module, weights, lengths, cotangents=None, seed=3):
    """(native outputs, native grads, kernel outputs, kernel grads) w.r.t. x, h0, c0 and the
    given weights (the module's parameters, or stand-ins for them)."""
    native_wrt = [t for t in [x, h0, c0, *layer_params(module)] if t is not None]
    wrt = [t for t in [x, h0, c0, *weights] if t is not None]
    expected = native_run(module, cell, x, h0, c0, lengths)
    g = torch.Generator().manual_seed(seed)
    cot = cotangents or [torch.randn(r.shape, dtype=r.dtype, generator=g) if r is not None else None
                         for r in expected]
    expected_grads = torch.autograd.grad(loss_of(expected, cot), native_wrt)
    got = run_direction(cell, x, h0, c0, *weights, lengths)
    got_grads = torch.autograd.grad(loss_of(got, cot), wrt)
    return expected, expected_grads, got, got_grads


@pytest.mark.parametrize("steps,batch,hidden", [(2, 1, 5), (3, 2, 5), (1, 3, 6)], ids=["T2-B1-H5", "T3-B2-H5", "T1-B3-H6"])
@pytest.mark.parametrize("cell,proj", [("lstm", 0), ("lstm", 3), ("gru", 0)], ids=["lstm", "lstm-proj3", "gru"])
def test_odd_sizes_match_native_without_warnings(cell, proj, steps, batch, hidden):
    """Sizes where T, B and H differ (a single sequence, H not a divisor of anything): outputs
    and every gradient equal nn.LSTM/nn.GRU's, with and without gradients recorded, and the
    kernel warns about nothing (no silently resized buffer)."""
    import warnings

    torch.manual_seed(0)
    if cell == "lstm":
        module = torch.nn.LSTM(I, hidden, proj_size=proj, dtype=torch.float64)
    else:
        module = torch.nn.GRU(I, hidden, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(steps, batch, I, dtype=torch.float64, generator=g).requires_grad_()
    h0 = torch.randn(batch, proj or hidden, dtype=torch.float64, generator=g).requires_grad_()
    c0 = torch.randn(batch, hidden, dtype=torch.float64, generator=g).requires_grad_() if cell == "lstm" else None
    for lengths in (None, torch.arange(batch, dtype=torch.int64) % steps + 1):
        expected, expected_grads, _, _ = _native_and_kernel_grads(cell, proj, x, h0, c0, module,
                                                                  layer_params(module), lengths)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _, _, got, got_grads = _native_and_kernel_grads(cell, proj, x, h0, c0, module,
                                                            layer_params(module), lengths)
            with torch.no_grad():
                plain = run_direction(cell, x, h0, c0, *layer_params(module), lengths)
            zero_state = run_direction(cell, x, None, None, *layer_params(module), lengths)
        for e, r, p in zip(expected, got, plain):
            if e is not None:
                torch.testing.assert_close(r, e, atol=1e-12, rtol=0)
                torch.testing.assert_close(p, e, atol=1e-12, rtol=0)
        for e, r in zip(expected_grads, got_grads):
            torch.testing.assert_close(r, e, atol=1e-12, rtol=0)
        zeros = (torch.zeros(batch, proj or hidden, dtype=torch.float64),
                 torch.zeros(batch, hidden, dtype=torch.float64) if cell == "lstm" else None)
        want = native_run(module, cell, x, *zeros, lengths)
        for e, r in zip(want, zero_state):
            if e is not None:
                torch.testing.assert_close(r, e, atol=1e-12, rtol=0)


@pytest.mark.parametrize("which", ["b_ih", "b_hh"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_single_bias_equals_native_with_the_other_bias_zero(cell, which):
    """One bias given, the other None: the same outputs and gradients as the built-in module
    whose other bias is zero (and no gradient is handed to the absent one)."""
    module = make_module(cell, 0, True, torch.float64)
    other = "bias_hh_l0" if which == "b_ih" else "bias_ih_l0"
    with torch.no_grad():
        getattr(module, other).zero_()
    w_ih, w_hh, b_ih, b_hh, _ = layer_params(module)
    weights = [w_ih, w_hh, b_ih if which == "b_ih" else None, b_hh if which == "b_hh" else None, None]
    x, h0, c0 = inputs(cell, 0, torch.float64)
    for lengths in (None, torch.tensor(LENGTHS)):
        expected, expected_grads, got, got_grads = _native_and_kernel_grads(cell, 0, x, h0, c0, module, weights,
                                                                            lengths)
        for e, r in zip(expected, got):
            if e is not None:
                torch.testing.assert_close(r, e, atol=1e-12, rtol=0)
        # native grads: x, h0, (c0), w_ih, w_hh, b_ih, b_hh; the kernel's lack the zeroed bias
        n_state = 3 if cell == "lstm" else 2
        keep = [i for i in range(len(expected_grads)) if i != n_state + 2 + (1 if which == "b_ih" else 0)]
        assert len(got_grads) == len(keep)
        for i, r in zip(keep, got_grads):
            torch.testing.assert_close(r, expected_grads[i], atol=1e-12, rtol=0)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_bias_gradients_are_separate_tensors(cell):
    """d b_ih and d b_hh are equal in value (both biases are summed), but they are two tensors:
    changing one in place (an optimizer, a hook) must not change the other."""
    module = make_module(cell, 0, True, torch.float64)
    x, h0, c0 = inputs(cell, 0, torch.float64)
    w_ih, w_hh, b_ih, b_hh, _ = layer_params(module)
    out = run_direction(cell, x, h0, c0, w_ih, w_hh, b_ih, b_hh, None, None)
    g_ih, g_hh = torch.autograd.grad(out[0].sum(), [b_ih, b_hh])
    want = g_hh.clone()
    g_ih.zero_()
    torch.testing.assert_close(g_hh, want, atol=0, rtol=0)
    assert want.abs().sum() > 0


@pytest.mark.parametrize("cell,proj", [("lstm", 0), ("lstm", 2), ("gru", 0)], ids=["lstm", "lstm-proj2", "gru"])
def test_create_graph_and_batched_cotangents_give_native_gradients(cell, proj):
    """Under create_graph=True and with batched grad_outputs the backward runs through the
    recorded layers: the first-order gradients are still nn.LSTM/nn.GRU's (biases and
    lengths included), and so are the second-order ones."""
    module = make_module(cell, proj, True, torch.float64)
    x, h0, c0 = inputs(cell, proj, torch.float64)
    lengths = torch.tensor(LENGTHS)
    params = layer_params(module)
    wrt = [t for t in [x, h0, c0, *params] if t is not None]
    expected = native_run(module, cell, x, h0, c0, lengths)
    g = torch.Generator().manual_seed(4)
    cot = [torch.randn(r.shape, dtype=torch.float64, generator=g) if r is not None else None for r in expected]
    expected_grads = torch.autograd.grad(loss_of(expected, cot), wrt, create_graph=True)
    v = [torch.randn(t.shape, dtype=torch.float64, generator=g) for t in wrt]
    expected_second = torch.autograd.grad(sum((e * w).sum() for e, w in zip(expected_grads, v)), wrt)

    got = run_direction(cell, x, h0, c0, *params, lengths)
    got_grads = torch.autograd.grad(loss_of(got, cot), wrt, create_graph=True)
    for e, r in zip(expected_grads, got_grads):
        torch.testing.assert_close(r, e, atol=1e-10, rtol=0)
    got_second = torch.autograd.grad(sum((e * w).sum() for e, w in zip(got_grads, v)), wrt)
    for e, r in zip(expected_second, got_second):
        torch.testing.assert_close(r, e, atol=1e-10, rtol=0)

    outs = [r for r in got if r is not None]
    batched = [torch.stack([c, 2 * c]) for c in cot if c is not None]
    got_batched = torch.autograd.grad(outs, wrt, batched, is_grads_batched=True)
    for e, r in zip(expected_grads, got_batched):
        torch.testing.assert_close(r[0], e.detach(), atol=1e-10, rtol=0)
        torch.testing.assert_close(r[1], 2 * e.detach(), atol=1e-10, rtol=0)


# ---- the scratch pool ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["no_grad", "nothing-requires-grad"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_inference_reuses_one_pooled_projection_buffer(cell, mode, monkeypatch):
    """Without a graph to record (torch.no_grad, or no input requiring grad) the kernel records
    nothing, its outputs equal the recording forward's (lengths included), and its input
    projection lives in one pooled buffer that every call takes and gives back: the pool
    neither grows nor is bypassed."""
    from rnnbench.torch.backends.bptt import lstm_gru

    pool = lstm_gru._ScratchPool()
    monkeypatch.setattr(lstm_gru, "_scratch", pool)
    module = make_module(cell, 0, True, torch.float32)
    x, h0, c0 = inputs(cell, 0, torch.float32)
    lengths = torch.tensor(LENGTHS)
    recorded = run_direction(cell, x, h0, c0, *layer_params(module), lengths)
    gates = 4 if cell == "lstm" else 3
    shared = torch.full((T, B, gates * H), float("nan"))
    pool.give(shared)

    args = [x, h0, c0, *layer_params(module)]
    for _ in range(3):
        if mode == "no_grad":
            with torch.no_grad():
                plain = run_direction(cell, *args, lengths)
        else:
            plain = run_direction(cell, *[a.detach() if a is not None else None for a in args], lengths)
        assert plain[0].grad_fn is None and not plain[0].requires_grad
        for a, b in zip(recorded, plain):
            if a is not None:
                torch.testing.assert_close(b, a.detach(), atol=0, rtol=0)
    assert not torch.isnan(shared).any()  # the calls used the pooled buffer...
    assert pool.take(shared.shape, x) is shared  # ...and gave it back
    assert pool.take(shared.shape, x) is not shared  # and nothing else of that shape piled up
    assert pool.take(shared.shape, x).data_ptr() != shared.data_ptr()


def test_scratch_pool_hands_a_buffer_out_again_only_once_given_back():
    from rnnbench.torch.backends.bptt.lstm_gru import _ScratchPool

    pool = _ScratchPool()
    like = torch.empty(0)
    a = pool.take((2, 3), like)
    assert a.shape == (2, 3) and a.dtype == torch.float32 and a.device.type == "cpu"
    b = pool.take((2, 3), like)
    assert b.data_ptr() != a.data_ptr()  # a is in use
    pool.give(None, a)  # None is skipped, not the end of the list
    assert pool.take((2, 3), like) is a
    assert pool.take((2, 3), like) is not a  # handed out once only
    pool.give(a, b)
    assert pool.take((3, 2), like) is not a and pool.take((3, 2), like) is not b  # other shape
    assert pool.take((2, 3), torch.empty(0, dtype=torch.float64)).dtype == torch.float64  # other dtype
    assert {id(pool.take((2, 3), like)), id(pool.take((2, 3), like))} == {id(a), id(b)}
    fresh = pool.take((2, 3), like)
    assert fresh is not a and fresh is not b
    # non-CPU tensors are never pooled: a fresh one each time, of the asked shape
    meta = torch.empty(0, device="meta")
    m = pool.take((4, 5), meta)
    assert m.shape == (4, 5) and m.device.type == "meta"
    pool.give(m, a)
    got = pool.take((4, 5), meta)
    assert got is not m and got.shape == (4, 5)
    assert pool.take((2, 3), like) is a  # a was kept although a meta buffer came first


def test_scratch_pool_keeps_at_most_max_bytes():
    from rnnbench.torch.backends.bptt.lstm_gru import _ScratchPool

    like = torch.empty(0)
    size = torch.empty(2, 3).nbytes
    pool = _ScratchPool(max_bytes=2 * size)
    a, b, c = (torch.empty(2, 3) for _ in range(3))

    def held():  # what the pool hands out before it has to allocate, in order
        out = []
        while True:
            t = pool.take((2, 3), like)
            if not any(t is u for u in (a, b, c)):
                return out
            out.append(t)

    pool.give(a, b)  # exactly max_bytes: both kept
    assert [id(t) for t in held()] == [id(b), id(a)]
    pool.give(a, b, c)  # one too many: the pool is emptied, then keeps c
    assert [id(t) for t in held()] == [id(c)]
    for _ in range(3):  # taking and giving back keeps the count right
        pool.give(a)
        assert [id(t) for t in held()] == [id(a)]
    pool.give(a, b)
    assert [id(t) for t in held()] == [id(b), id(a)]
    pool.give(a, b)  # full; taking one out and giving it back leaves it full, not over
    assert pool.take((2, 3), like) is b
    pool.give(b)
    assert [id(t) for t in held()] == [id(b), id(a)]
    pool.give(a)
    pool.give(b)
    pool.give(c)
    assert [id(t) for t in held()] == [id(c)]


def test_scratch_pool_is_per_thread():
    import threading

    from rnnbench.torch.backends.bptt.lstm_gru import _ScratchPool

    pool = _ScratchPool()
    a = torch.empty(2, 3)
    pool.give(a)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(pool.take((2, 3), a)))
    thread.start()
    thread.join()
    assert len(seen) == 1 and seen[0] is not a
    assert pool.take((2, 3), a) is a


# ---- bad input: the exact error, naming the argument and what it got --------------------
@pytest.mark.parametrize("overrides,error,match", [
    (dict(x=torch.randn(T, I)), ValueError, r"x must be a 3-D tensor \(T, B, I\), got tensor of shape \(5, 3\)"),
    (dict(x=[[1.0]]), ValueError, r"x must be a 3-D tensor \(T, B, I\), got list"),
    (dict(x=torch.ones(T, B, I, dtype=torch.int64)), TypeError,
     r"x must be a floating-point tensor, got dtype torch.int64"),
    (dict(x=torch.randn(0, B, I)), ValueError, r"x must have at least one step, got shape \(0, 4, 3\)"),
    (dict(w_hh=torch.randn(4 * H)), ValueError,
     r"w_hh must be a 2-D tensor \(4\*hidden_size, h_size\) for lstm, got tensor of shape \(16,\)"),
    (dict(w_hh=None), ValueError, r"w_hh must be a 2-D tensor .* got NoneType"),
    (dict(w_hh=torch.randn(4 * H, H + 1)), ValueError,
     r"w_hh has 5 columns but hidden_size is 4; without w_hr \(projection\) they must be equal"),
    (dict(w_ih=None), ValueError, r"^w_ih is required$"),
    (dict(b_ih=None, b_hh=None, h0=torch.randn(B + 1, H)), ValueError, r"h0 has shape \(5, 4\), expected \(4, 4\)"),
    (dict(h0=[[0.0] * H] * B), TypeError, r"h0 must be a torch.Tensor or None, got list"),
    (dict(h0=torch.empty(B, H, device="meta")), ValueError, r"h0 is on meta, expected x's device cpu"),
    (dict(b_hh=torch.randn(3)), ValueError, r"b_hh has shape \(3,\), expected \(16,\)"),
    (dict(lengths=torch.tensor([1, 2, 3])), ValueError,
     r"lengths must be a tensor of shape \(4,\), got tensor of shape \(3,\)"),
    (dict(lengths=[1, 2, 3, 4]), ValueError, r"lengths must be a tensor of shape \(4,\), got list"),
    (dict(lengths=torch.ones(B, dtype=torch.int64, device="meta")), ValueError,
     r"lengths is on meta, expected x's device cpu"),
], ids=["x-2d", "x-list", "x-int", "x-no-steps", "w_hh-1d", "w_hh-none", "w_hh-columns", "w_ih-none",
        "h0-shape-no-bias", "h0-list", "h0-device", "b_hh-shape", "lengths-shape", "lengths-list",
        "lengths-device"])
def test_bad_input_raises_the_exact_error_naming_what_it_got(overrides, error, match):
    with pytest.raises(error, match=match):
        run_direction(**_lstm_args(**overrides))


@pytest.mark.parametrize("overrides,error,match", [
    (dict(h0=torch.randn(B + 1, H)), ValueError, r"h0 has shape \(5, 4\), expected \(4, 4\) \(cell=gru"),
    (dict(b_ih=torch.randn(4 * H)), ValueError, r"b_ih has shape \(16,\), expected \(12,\)"),
    (dict(b_hh=torch.randn(4 * H)), ValueError, r"b_hh has shape \(16,\), expected \(12,\)"),
    (dict(lengths=torch.tensor([1, 2, 3])), ValueError, r"lengths must be a tensor of shape \(4,\)"),
    (dict(lengths=torch.tensor([1, 2, 0, 3])), ValueError, r"lengths must be in \[1, T=5\], got values in \[0, 3\]"),
], ids=["h0-shape", "b_ih-shape", "b_hh-shape", "lengths-shape", "lengths-range"])
def test_gru_bad_input_raises_the_exact_error(overrides, error, match):
    module = make_module("gru", 0, True, torch.float32)
    x, h0, _ = inputs("gru", 0, torch.float32)
    w_ih, w_hh, b_ih, b_hh, _ = layer_params(module)
    args = dict(cell="gru", x=x, h0=h0, c0=None, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh, w_hr=None, lengths=None)
    args.update(overrides)
    with pytest.raises(error, match=match):
        run_direction(**args)
