"""rnnbench.torch.LSTM / GRU behave as drop-in nn.LSTM / nn.GRU (default backend and a few others).

Drop-in behaviour: same parameters (names, shapes, order, initial values under a seed),
state_dict both ways, unbatched input, batch_first, hx, PackedSequence sorted and
unsorted, dropout only between layers in training mode; and every bad input raises an
error that names the problem.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

import rnnbench.torch
from rnnbench.torch import BackendUnavailableError, RNNInputError

F64 = torch.float64
# The default backend plus the native one; test_torch_backends covers every backend.
API_BACKENDS = ["eager", "native"]


def pair(cell="lstm", backend="eager", seed=0, **kw):
    """(nn reference, rnnbench.torch module) with the same parameters, float64."""
    kw.setdefault("dtype", F64)
    torch.manual_seed(seed)
    ref = (nn.LSTM if cell == "lstm" else nn.GRU)(**kw)
    ours = (rnnbench.torch.LSTM if cell == "lstm" else rnnbench.torch.GRU)(**kw, backend=backend)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def assert_same(a, b, atol=1e-12):
    """Structurally equal outputs (tensors, tuples, PackedSequences), values within atol."""
    if isinstance(a, PackedSequence):
        assert isinstance(b, PackedSequence)
        for name in ("batch_sizes", "sorted_indices", "unsorted_indices"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None and y is None) or torch.equal(x, y), name
        assert_same(a.data, b.data, atol)
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y, atol)
    else:
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(b, a, atol=atol, rtol=0)


# ---- parameters and state_dict ----------------------------------------------------------

@pytest.mark.parametrize("cell,kw", [
    ("lstm", dict(num_layers=2, bidirectional=True, proj_size=3)),
    ("gru", dict(num_layers=2, bias=False)),
])
def test_parameters_match_nn_names_shapes_order_and_init(cell, kw):
    torch.manual_seed(7)
    ref = (nn.LSTM if cell == "lstm" else nn.GRU)(4, 5, **kw)
    torch.manual_seed(7)
    ours = (rnnbench.torch.LSTM if cell == "lstm" else rnnbench.torch.GRU)(4, 5, **kw)
    ref_sd, our_sd = ref.state_dict(), ours.state_dict()
    assert list(our_sd) == list(ref_sd)
    for name in ref_sd:
        assert torch.equal(our_sd[name], ref_sd[name]), name  # same RNG draws, same order


def test_state_dict_round_trip_both_ways():
    ref, ours = pair(input_size=3, hidden_size=4, num_layers=2, bidirectional=True)
    x = torch.randn(5, 2, 3, dtype=F64)
    assert_same(ref(x), ours(x))
    torch.manual_seed(99)
    back = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=F64)
    back.load_state_dict(ours.state_dict())
    assert_same(ref(x), back(x), atol=0)


def test_load_state_dict_names_missing_and_unexpected_keys():
    ours = rnnbench.torch.LSTM(3, 4)
    sd = nn.LSTM(3, 4).state_dict()
    missing = {k: v for k, v in sd.items() if k != "bias_hh_l0"}
    with pytest.raises(RuntimeError, match="bias_hh_l0"):
        ours.load_state_dict(missing)
    extra = dict(sd, weight_ih_l1=torch.zeros(16, 4))
    with pytest.raises(RuntimeError, match="weight_ih_l1"):
        ours.load_state_dict(extra)


# ---- forward variants -------------------------------------------------------------------

@pytest.mark.parametrize("backend", API_BACKENDS)
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_unbatched_input_with_and_without_hx(cell, backend):
    ref, ours = pair(cell, backend, input_size=3, hidden_size=4, num_layers=2, bidirectional=True)
    x = torch.randn(6, 3, dtype=F64)
    assert_same(ref(x), ours(x))
    h = torch.randn(4, 4, dtype=F64)
    hx = (h, torch.randn(4, 4, dtype=F64)) if cell == "lstm" else h
    assert_same(ref(x, hx), ours(x, hx))


@pytest.mark.parametrize("backend", API_BACKENDS)
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_batch_first_with_hx(cell, backend):
    ref, ours = pair(cell, backend, input_size=3, hidden_size=4, batch_first=True, bidirectional=True)
    x = torch.randn(2, 5, 3, dtype=F64)
    h = torch.randn(2, 2, 4, dtype=F64)
    hx = (h, torch.randn(2, 2, 4, dtype=F64)) if cell == "lstm" else h
    assert_same(ref(x, hx), ours(x, hx))


@pytest.mark.parametrize("backend", API_BACKENDS)
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_packed_sequence_keeps_indices_and_matches(cell, enforce_sorted, backend):
    ref, ours = pair(cell, backend, input_size=3, hidden_size=4, num_layers=2, bidirectional=True)
    lengths = torch.tensor([6, 4, 4, 1]) if enforce_sorted else torch.tensor([2, 6, 1, 4])
    x = torch.randn(6, 4, 3, dtype=F64)
    packed = pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
    h = torch.randn(4, 4, 4, dtype=F64)
    hx = (h, torch.randn(4, 4, 4, dtype=F64)) if cell == "lstm" else h
    for state in (None, hx):
        expected, got = ref(packed, state), ours(packed, state)
        assert isinstance(got[0], PackedSequence)
        assert_same(expected, got)


@pytest.mark.parametrize("backend", API_BACKENDS)
def test_lengths_keyword_equals_packing(backend):
    ref, ours = pair("lstm", backend, input_size=3, hidden_size=4, bidirectional=True, batch_first=True)
    x = torch.randn(3, 5, 3, dtype=F64)
    lengths = torch.tensor([2, 5, 3])
    out_p, (h_p, c_p) = ref(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    out_ref, _ = pad_packed_sequence(out_p, batch_first=True, total_length=5)
    out, (h, c) = ours(x, lengths=lengths)
    assert_same((out_ref, h_p, c_p), (out, h, c))
    assert torch.all(out[0, 2:] == 0)


def test_gru_returns_tensor_and_lstm_returns_tuple():
    x = torch.randn(3, 2, 4)
    _, h = rnnbench.torch.GRU(4, 5)(x)
    assert isinstance(h, torch.Tensor) and h.shape == (1, 2, 5)
    _, (h, c) = rnnbench.torch.LSTM(4, 5, proj_size=2)(x)
    assert h.shape == (1, 2, 2) and c.shape == (1, 2, 5)


# ---- dropout ----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", API_BACKENDS)
def test_dropout_one_zeroes_between_layers_only_in_training(backend):
    # dropout=1.0 is deterministic: every layer after the first sees a zero input.
    ref, ours = pair("lstm", backend, input_size=3, hidden_size=4, num_layers=3, dropout=1.0)
    x = torch.randn(5, 2, 3, dtype=F64)
    ref.train(), ours.train()
    assert_same(ref(x), ours(x))
    ref.eval(), ours.eval()
    assert_same(ref(x), ours(x))
    ours.train()
    trained, evaluated = ours(x), ours.eval()(x)
    assert not torch.allclose(trained[0], evaluated[0])


def test_dropout_is_not_applied_after_the_last_layer_or_before_the_first():
    torch.manual_seed(0)
    ours = rnnbench.torch.LSTM(3, 4, num_layers=2, dropout=0.5, dtype=F64)
    x = torch.randn(5, 2, 3, dtype=F64)
    _, (h_eval, _) = ours.eval()(x)
    outs = [ours.train()(x) for _ in range(4)]
    for out, (h_n, _) in outs:
        torch.testing.assert_close(h_n[0], h_eval[0], atol=0, rtol=0)  # layer 0 untouched
        torch.testing.assert_close(out[-1], h_n[1], atol=0, rtol=0)     # last output not dropped
    assert not all(torch.equal(outs[0][0], o) for o, _ in outs[1:])  # layer 1 input is dropped at random


def test_single_layer_dropout_warns_like_nn():
    with pytest.warns(UserWarning, match="dropout"):
        rnnbench.torch.LSTM(3, 4, dropout=0.3)


# ---- backends ---------------------------------------------------------------------------

def test_backends_listed_and_available():
    assert rnnbench.torch.BACKENDS[-1] == "native" and "eager" in rnnbench.torch.BACKENDS
    available = rnnbench.torch.available_backends("cpu")
    assert {"native", "eager", "naive", "cell_loop"} <= set(available)
    assert set(available) <= set(rnnbench.torch.BACKENDS)
    for b in rnnbench.torch.BACKENDS:
        reason = rnnbench.torch.unavailable_reason(b, "cpu")
        assert (reason is None) == (b in available)
        assert reason is None or isinstance(reason, str) and reason


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown backend 'fast'.*eager.*native"):
        rnnbench.torch.LSTM(3, 4, backend="fast")
    module = rnnbench.torch.GRU(3, 4)
    with pytest.raises(ValueError, match="valid backends"):
        module.backend = "cudnn"
    with pytest.raises(ValueError, match="unknown backend"):
        rnnbench.torch.unavailable_reason("nope")


@pytest.mark.parametrize("backend", ["naive", "cell_loop"])
def test_proj_size_on_backend_without_projection_names_those_with(backend):
    with pytest.raises(ValueError, match="does not support proj_size.*eager.*bptt.*native"):
        rnnbench.torch.LSTM(3, 4, proj_size=2, backend=backend)


def test_backend_that_cannot_run_here_raises_with_reason(monkeypatch):
    module = rnnbench.torch.LSTM(3, 4)
    monkeypatch.setattr(rnnbench.torch.backends, "unavailable_reason", lambda b, d: "no frobnicator on this host")
    with pytest.raises(BackendUnavailableError, match="'eager' cannot run on cpu: no frobnicator"):
        module(torch.randn(2, 1, 3))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA reason")
def test_cuda_unavailable_reason_without_cuda():
    assert "CUDA is not available" in rnnbench.torch.unavailable_reason("eager", "cuda")
    assert "cuda" not in rnnbench.torch.available_backends("cuda")
    assert rnnbench.torch.available_backends("cuda") == ()


# ---- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", API_BACKENDS)
def test_bad_inputs_name_the_problem(backend):
    lstm = rnnbench.torch.LSTM(3, 4, num_layers=2, backend=backend)
    gru = rnnbench.torch.GRU(3, 4, backend=backend)
    x = torch.randn(5, 2, 3)
    cases = [
        (lambda: lstm(torch.randn(5)), "Expected input to be 2D or 3D, got 1D instead"),
        (lambda: lstm(torch.randn(5, 2, 3, 1)), "got 4D instead"),
        (lambda: lstm(torch.randn(5, 2, 7)), "input.size\\(-1\\) must be equal to input_size. Expected 3, got 7"),
        (lambda: lstm(x.double()), "RNN input dtype \\(torch.float64\\) does not match weight dtype \\(torch.float32\\)"),
        (lambda: lstm(x, torch.zeros(2, 2, 4)), "hx must be a tuple \\(h_0, c_0\\)"),
        (lambda: lstm(x, (torch.zeros(1, 2, 4), torch.zeros(2, 2, 4))), "Expected hidden\\[0\\] size \\(2, 2, 4\\), got \\[1, 2, 4\\]"),
        (lambda: lstm(x, (torch.zeros(2, 2, 4), torch.zeros(2, 3, 4))), "Expected hidden\\[1\\] size \\(2, 2, 4\\), got \\[2, 3, 4\\]"),
        (lambda: lstm(x, (torch.zeros(2, 2, 4, dtype=F64), torch.zeros(2, 2, 4))), "h_0 has dtype torch.float64, expected torch.float32"),
        (lambda: lstm(torch.randn(5, 3), (torch.zeros(2, 1, 4), torch.zeros(2, 1, 4))), "For unbatched 2-D input, hx and cx should also be 2-D but got \\(3-D, 3-D\\)"),
        (lambda: gru(x, (torch.zeros(1, 2, 4),)), "hx must be a Tensor"),
        (lambda: gru(x, torch.zeros(1, 2, 5)), "Expected hidden size \\(1, 2, 4\\), got \\[1, 2, 5\\]"),
        (lambda: lstm(x, lengths=torch.tensor([0, 5])), "lengths must be in \\[1, T=5\\], got min 0"),
        (lambda: lstm(x, lengths=torch.tensor([6, 5])), "lengths must be in \\[1, T=5\\], got min 5 and max 6"),
        (lambda: lstm(x, lengths=torch.tensor([5, 5, 5])), "one entry per sequence \\(2\\)"),
        (lambda: lstm(x, lengths=torch.tensor([2.0, 5.0])), "lengths must be integers"),
        (lambda: lstm(torch.randn(5, 3), lengths=torch.tensor([5])), "needs batched 3-D input"),
        (lambda: lstm([1, 2, 3]), "input must be a Tensor or a PackedSequence"),
    ]
    for call, pattern in cases:
        with pytest.raises((ValueError, TypeError), match=pattern):
            call()


def test_input_errors_are_also_runtime_errors_like_nn():
    with pytest.raises(RuntimeError):
        rnnbench.torch.LSTM(3, 4)(torch.randn(5, 2, 7))
    assert issubclass(RNNInputError, ValueError) and issubclass(RNNInputError, RuntimeError)


def test_constructor_rejects_bad_sizes_like_nn():
    with pytest.raises(ValueError, match="proj_size"):
        rnnbench.torch.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="dropout"):
        rnnbench.torch.LSTM(3, 4, num_layers=2, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size"):
        rnnbench.torch.GRU(3, 0)


# ---- the mode and the arithmetic a measurement or a parity case runs in ------------------------

@pytest.fixture
def tf32_allowed():
    """Both TF32 flags on (a user's choice the rungs must override), restored afterwards."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.set_flags(_allow_tf32=True, _fp32_precision=None)  # attributes may be frozen
    torch.backends.cuda.matmul.allow_tf32 = True
    yield
    torch.backends.cudnn.set_flags(_allow_tf32=saved[0], _fp32_precision=None)
    torch.backends.cuda.matmul.allow_tf32 = saved[1]


def test_ieee_float32_works_where_pytorchs_test_harness_froze_the_flags(tf32_allowed):
    """PyTorch's own test harness (which the peer suites import) freezes the cuDNN flags
    (`torch.backends.disable_global_flags`): the rungs must still compute IEEE float32."""
    from rnnbench.torch.precision import ieee_float32
    frozen = torch.backends.flags_frozen()
    torch.backends.disable_global_flags()
    try:
        with ieee_float32():
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        if not frozen:
            setattr(torch.backends, "__allow_nonbracketed_mutation_flag", True)


def _record_flags_and_mode(module, seen):
    """Record (training, cuDNN TF32, cuBLAS TF32) in the forward and again in the backward."""
    def flags(tag):
        return tag, module.training, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32

    def hook(mod, args, out):
        seen.append(flags("forward"))
        output = out[0].data if isinstance(out[0], PackedSequence) else out[0]
        if output.requires_grad:
            output.register_hook(lambda g: seen.append(flags("backward")))
    module.register_forward_hook(hook)


@pytest.mark.parametrize("backend", ["native", "eager"])
def test_workloads_train_in_training_mode_and_infer_in_eval_mode_in_ieee_float32(backend, tf32_allowed):
    """cuDNN computes an RNN's backward only in training mode, and PyTorch lets cuDNN use TF32
    for float32 by default: a measurement trains as a user trains, infers as a user infers,
    and computes float32 as float32 in both passes; the user's flags come back afterwards."""
    from rnnbench.core.spec import RNNSpec
    from rnnbench.torch.adapter import get_adapter
    wl = get_adapter(backend).make_workload(RNNSpec("lstm", 4, 5), seq_len=3, batch=2)
    seen = []
    _record_flags_and_mode(wl.module, seen)
    wl.forward()
    wl.train_step()
    assert seen == [("forward", False, False, False), ("forward", True, False, False),
                    ("backward", True, False, False)]
    assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32


def test_run_case_computes_gradients_in_training_mode_and_ieee_float32(monkeypatch, tf32_allowed):
    import numpy as np

    from rnnbench.core.params import init_params
    from rnnbench.core.spec import RNNSpec
    from rnnbench.torch import adapter
    spec = RNNSpec("gru", 3, 4)
    rng = np.random.default_rng(0)
    params, x = init_params(spec, rng), rng.standard_normal((3, 2, 3))
    seen = []
    build = adapter.build_module

    def recording_build(*args, **kwargs):
        module = build(*args, **kwargs)
        _record_flags_and_mode(module, seen)
        return module
    monkeypatch.setattr(adapter, "build_module", recording_build)
    cot = {"output": rng.standard_normal((3, 2, 4)), "h_n": rng.standard_normal((1, 2, 4))}
    adapter.get_adapter("native").run_case(spec, params, x, dtype="float32")
    adapter.get_adapter("native").run_case(spec, params, x, cotangents=cot, dtype="float32")
    assert seen == [("forward", False, False, False), ("forward", True, False, False),
                    ("backward", True, False, False)]
    assert torch.backends.cudnn.allow_tf32
