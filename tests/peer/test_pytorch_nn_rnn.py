"""PyTorch's nn.LSTM / nn.GRU tests from test/test_nn.py, run on every rnnbench.torch backend.

Upstream: pytorch/pytorch `test/test_nn.py` (classes TestNN and TestNNDeviceType, CPU
instantiation), read at pytorch/pytorch@74f2fa66feec00335f72813782f4802e80bff4cb.  Every
test there that constructs nn.LSTM or nn.GRU and can run on CPU is re-implemented in plain
pytest with the same inputs (shapes, values, seeds), the same expectations (exception
types and regexes, `TestCase.assertEqual` with upstream's default tolerances or the
tolerances the test passes, `dtype2prec_DONTUSE`, `torch.allclose` where upstream uses it)
and the `gradcheck` / `gradgradcheck` wrappers of torch.testing._internal.common_utils.
Upstream loops over ['RNN', 'GRU', 'LSTM'] are parametrised over GRU and LSTM (nn.RNN has
no rnnbench.torch counterpart).

The module class is substituted by rnnbench.torch.LSTM / rnnbench.torch.GRU with `backend=b` for
every b in rnnbench.torch.BACKENDS, plus the control `b = "nn"` (plain torch.nn.LSTM /
torch.nn.GRU), which must pass 100%.  The only relaxation: backends outside
rnnbench.torch.PROJ_BACKENDS (naive, cell_loop) do not support proj_size; where a test builds an
LSTM with proj_size>0 it EXPECTS `ProjectionNotSupportedError` (a ValueError naming the
backend) at construction and skips only what needed that module.

Adapted, TestNN:
  test_rnn_args_check, test_projections_lstm_args_check, test_rnn_initial_hidden_state,
  test_projections_lstm_initial_hidden_state, test_projections_errors_on_gru_and_rnn (GRU),
  test_cudnn_forward_exception (despite its name it has no CUDA gate and runs on CPU),
  test_RNN_input_size_zero (empty batch), test_rnn_weight_norm,
  test_error_RNN_seq_len_zero (zero-length sequence; upstream gates the whole test on cuDNN
  being present but loops over every device, cpu included: its cpu branch is adapted),
  test_RNN_dropout_state and test_RNN_change_dropout: upstream builds nn.RNN(relu) only (and
  is gated on cuDNN); their CPU branch is adapted with the module substituted by LSTM/GRU,
  same sizes, dropout values and assertions (hx for LSTM: the (h, c) pair, both torch.rand,
  as upstream draws hx).
Adapted, TestNNDeviceType (cpu):
  test_rnn_retain_variables, test_LSTM_grad_and_gradgrad, test_GRU_grad_and_gradgrad,
  test_LSTM_differentiable_backward_using_oneDNN (its dtype parameter is unused upstream,
  so its float32 and bfloat16 instances are the same test: run once),
  test_variable_sequence (packed vs per-sequence, sorted and unsorted, default and given
  hx, proj_size 0 and 2), test_save_lstm_compatibility.
Adapted from CUDA-only tests whose substance is "this implementation vs nn.<module>" (the CPU
  nn.<module> stays the reference; the backend's module takes the cuDNN side):
  test_RNN_cpu_vs_cudnn_no_dropout / _with_dropout (_test_RNN_cpu_vs_cudnn: identical weights,
  non-contiguous inputs, lengths as a list and as a tensor, h_0/c_0 gradients under non-trivial
  grad_hy/grad_cy, LSTM with projections), test_rnn_fused (float32 and float64).
Not adapted:
  CUDA / cuDNN / multi-GPU only: test_rnn_check_device, test_projections_lstm_check_device
  (every assertion needs cuda:0 and cuda:1), test_RNN_cudnn_weight_norm, test_partial_flat_weights,
  test_cudnn_weight_format, test_cudnn_weight_tying, test_cudnn_rnn_dropout_states_device,
  test_pack_sequence_batch_sizes_throw, test_device_mask;
  nn.RNN only: test_RNN_nonlinearity, test_RNN_nonlinearity_passed_as_arg, test_RNN_dropout
  (asserts the exact value 10000 that relu with unit weights gives: no LSTM/GRU analogue);
  cells (nn.RNNCell / GRUCell / LSTMCell, which rnnbench.torch does not provide): test_RNN_cell,
  test_RNN_cell_forward_zero_hidden_size, test_RNN_cell_no_broadcasting, test_LSTM_cell,
  test_LSTM_cell_forward_input_size, test_LSTM_cell_forward_hidden_size,
  test_lstmcell_backward_only_one_output_grad;
  test_invalid_dropout_p tests nn.Dropout / F.dropout only (now in test/nn/test_dropout.py),
  and the pack/pad utilities' own tests live in test/nn/test_packed_sequence.py (they do not
  go through an RNN); the RNN ones of test_nn.py are test_variable_sequence and the
  PackedSequence paths above.

Runtime: every backend runs everything, except that on `scan` (a compile of a forward and a
backward loop per shape and sequence length) the tests that build the most shapes
(test_RNN_cpu_vs_cudnn, test_RNN_input_size_zero, test_RNN_dropout_state,
test_RNN_change_dropout, test_rnn_retain_variables, test_rnn_fused,
test_LSTM_differentiable_backward_using_oneDNN, test_variable_sequence) are skipped with that
reason, and that on the torch.compile rungs (`compile`, `scan`: each new configuration costs a
compile, several seconds on a cold cache) test_variable_sequence runs only the last
of its five length cases (unsorted, variable lengths, batch of 7; with default and given hx,
proj_size 0 and 2); set RNNBENCH_PEER_FULL=1 to run all five there too.

Run: .venv/bin/python -m pytest tests/peer/test_pytorch_nn_rnn.py -q
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import warnings
from copy import deepcopy
from functools import partial
from itertools import product

import pytest
import torch
import torch.nn.utils.rnn as rnn_utils

import rnnbench.torch
from rnnbench.torch.backends import ProjectionNotSupportedError

from pytorch_testing import FULL, COMPILED, asserts, backend_params, common_utils, upstream_seed  # noqa: E402,F401
from pytorch_testing import module_class as rnn_cls  # noqa: E402  (upstream's getattr(nn, mode))

gradcheck = common_utils.gradcheck
gradgradcheck = common_utils.gradgradcheck
dtype2prec_DONTUSE = common_utils.dtype2prec_DONTUSE
set_default_dtype = common_utils.set_default_dtype
_asserts = asserts()  # TestNN / TestNNDeviceType's assertions (NNTestCase: upstream's default tolerances)
assertEqual = _asserts.assertEqual
assertNotEqual = _asserts.assertNotEqual

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BACKEND = pytest.mark.parametrize("backend", list(backend_params()))
# The tests that build the most shapes (sizes, sequence lengths, dropout and grad modes): on
# `scan`, which compiles a forward and backward loop per shape (seconds each), they are the
# suite's longest by far, so they run there under RNNBENCH_PEER_FULL=1 only.
SCAN_SKIP = ("a compile per shape and sequence length makes this test's many shapes the suite's longest run on "
             "scan; RNNBENCH_PEER_FULL=1 runs it")
BACKEND_MANY_SHAPES = pytest.mark.parametrize(
    "backend", list(backend_params(skip=lambda b: SCAN_SKIP if b == "scan" and not FULL else None)))
MODE = pytest.mark.parametrize("mode", ["GRU", "LSTM"])  # upstream: ['RNN', 'GRU', 'LSTM']


def projection_unsupported(backend: str, proj_size: int) -> bool:
    return backend != "nn" and proj_size > 0 and backend not in rnnbench.torch.PROJ_BACKENDS


def make(mode, backend, *args, **kwargs):
    """Construct; for proj_size on a backend that declares it unsupported, EXPECT the error.

    Returns None in that case (the caller skips what needed the module).
    """
    cls = rnn_cls(mode, backend)
    if projection_unsupported(backend, kwargs.get("proj_size", 0)):
        with pytest.raises(ProjectionNotSupportedError) as info:
            cls(*args, **kwargs)
        assert isinstance(info.value, ValueError)
        assert backend in str(info.value), f"the error does not name backend {backend!r}: {info.value}"
        return None
    return cls(*args, **kwargs)


def assertRaisesRegex(exc_type, regex, fn, *args, **kwargs):  # noqa: N802  (upstream's name)
    with pytest.raises(exc_type, match=regex):
        fn(*args, **kwargs)


def assertRaises(exc_type, fn, *args, **kwargs):  # noqa: N802
    with pytest.raises(exc_type):
        fn(*args, **kwargs)


# ============================ TestNN ===========================================================

@BACKEND
@MODE
def test_rnn_args_check(mode, backend):
    input_size = 3
    hidden_size = 5
    num_layers = 2
    batch_size = 4
    seq_len = 6
    num_directions = 1
    bad_size = 7  # prime number so that no size can divide it.

    correct_input_shape = (seq_len, batch_size, input_size)
    correct_hidden_shape = (num_layers * num_directions, batch_size, hidden_size)

    def update_shape(shape, dim, new_dim_size):
        new_shape = list(shape)
        new_shape[dim] = new_dim_size
        return tuple(new_shape)

    def get_inputs(input_shape, hidden_shape, mode):
        """list of (input, hidden)."""
        input = torch.randn(input_shape)
        hidden = torch.randn(hidden_shape)
        if mode != "LSTM":
            return [(input, hidden)]
        if hidden_shape == correct_hidden_shape:
            return [(input, (hidden, hidden))]
        good_hidden = torch.randn(correct_hidden_shape)
        return [(input, (hidden, good_hidden)), (input, (good_hidden, hidden))]

    def test(input_shape, hidden_shape, mode):
        for input, hidden in get_inputs(input_shape, hidden_shape, mode):
            model = make(mode, backend, input_size, hidden_size, num_layers)
            assertRaises(RuntimeError, model, input, hidden)

    # Incorrect input batch size
    test(update_shape(correct_input_shape, 1, bad_size), correct_hidden_shape, mode)
    # Incorrect hidden batch size
    test(correct_input_shape, update_shape(correct_hidden_shape, 1, bad_size), mode)
    # Incorrect input size
    test(update_shape(correct_input_shape, 2, bad_size), correct_hidden_shape, mode)
    # Incorrect hidden size
    test(correct_input_shape, update_shape(correct_hidden_shape, 2, bad_size), mode)
    # Incorrect hidden[0]
    test(correct_input_shape, update_shape(correct_hidden_shape, 0, bad_size), mode)


@BACKEND
def test_projections_lstm_args_check(backend):
    input_size = 3
    hidden_size = 5
    proj_size = 2
    num_layers = 2
    batch_size = 4
    seq_len = 6
    num_directions = 1
    bad_size = 7  # prime number so that no size can divide it.

    def test(input_shape, hidden_h_shape, hidden_c_shape):
        for input, hidden in get_inputs(input_shape, hidden_h_shape, hidden_c_shape):
            model = make("LSTM", backend, input_size, hidden_size, num_layers, proj_size=proj_size)
            if model is None:  # proj_size declared unsupported: the error was expected and seen
                continue
            assertRaises(RuntimeError, model, input, hidden)

    correct_input_shape = (seq_len, batch_size, input_size)
    correct_hidden_h_shape = (num_layers * num_directions, batch_size, proj_size)
    correct_hidden_c_shape = (num_layers * num_directions, batch_size, hidden_size)

    def update_shape(shape, dim, new_dim_size):
        new_shape = list(shape)
        new_shape[dim] = new_dim_size
        return tuple(new_shape)

    def get_inputs(input_shape, hidden_h_shape, hidden_c_shape):
        input = torch.randn(input_shape)
        hidden_h = torch.randn(hidden_h_shape)
        hidden_c = torch.randn(hidden_c_shape)
        return [(input, (hidden_h, hidden_c))]

    # Incorrect input batch size
    test(update_shape(correct_input_shape, 1, bad_size), correct_hidden_h_shape, correct_hidden_c_shape)
    # Incorrect hidden batch size
    test(correct_input_shape, update_shape(correct_hidden_h_shape, 1, bad_size),
         update_shape(correct_hidden_c_shape, 1, bad_size))
    # Incorrect input size
    test(update_shape(correct_input_shape, 2, bad_size), correct_hidden_h_shape, correct_hidden_c_shape)
    # Incorrect hidden size
    test(correct_input_shape, update_shape(correct_hidden_h_shape, 2, bad_size),
         update_shape(correct_hidden_c_shape, 2, bad_size))
    # Incorrect hidden[0]
    test(correct_input_shape, update_shape(correct_hidden_h_shape, 0, bad_size),
         update_shape(correct_hidden_c_shape, 0, bad_size))
    # Incorrect proj size = hidden size
    test(correct_input_shape, update_shape(correct_hidden_h_shape, 0, hidden_size), correct_hidden_c_shape)
    # Incorrect proj size != hidden size
    test(correct_input_shape, update_shape(correct_hidden_h_shape, 0, bad_size), correct_hidden_c_shape)
    # Incorrect cell size != hidden size
    test(correct_input_shape, correct_hidden_h_shape, update_shape(correct_hidden_c_shape, 0, bad_size))


@BACKEND
@MODE
def test_rnn_initial_hidden_state(mode, backend):
    rnn = make(mode, backend, 30, 20, 2)
    input = torch.randn(10, 32, 30)
    hidden = torch.zeros(2, 32, 20)
    if mode == "LSTM":
        hidden = (hidden, hidden)
    output1, hidden1 = rnn(input, hidden)
    output2, hidden2 = rnn(input)
    assertEqual(output1, output2)
    assertEqual(hidden1, hidden2)


@BACKEND
def test_projections_lstm_initial_hidden_state(backend):
    for bidir in [False, True]:
        rnn = make("LSTM", backend, 30, 20, 2, bidirectional=bidir, proj_size=10)
        if rnn is None:
            continue
        num_dirs = 2 if bidir else 1
        input = torch.randn(10, 32, 30)
        hidden_h = torch.zeros(2 * num_dirs, 32, 10)
        hidden_c = torch.zeros(2 * num_dirs, 32, 20)
        hidden = (hidden_h, hidden_c)
        output1, hidden1 = rnn(input, hidden)
        output2, hidden2 = rnn(input)
        assertEqual(output1, output2)
        assertEqual(hidden1, hidden2)


@BACKEND
def test_projections_errors_on_gru_and_rnn(backend):
    error_msg = "proj_size argument is only supported for LSTM, not RNN or GRU"
    for mode in ["GRU"]:  # upstream: ['RNN', 'GRU']
        with pytest.raises(ValueError, match=error_msg):
            rnn_cls(mode, backend)(30, 20, 2, proj_size=10)


# upstream's _test_RNN_cpu_vs_cudnn(dropout, dtype=torch.double), behind test_RNN_cpu_vs_cudnn_no_dropout
# (dropout=0) and test_RNN_cpu_vs_cudnn_with_dropout (dropout=1: in training mode every layer input after
# the first is zeroed, so both sides are deterministic).  Upstream compares nn.<module> on the CPU with the
# same module on cuDNN; here the CPU nn.<module> is compared with the backend's module, on the CPU.
CPU_VS_MODULES = {"GRU": ("GRU", 0), "LSTM": ("LSTM", 0), "LSTM_proj": ("LSTM", 3)}  # upstream: also nn.RNN


@BACKEND_MANY_SHAPES
@pytest.mark.parametrize("dropout", [0, 1], ids=["no_dropout", "with_dropout"])
@pytest.mark.parametrize("module", list(CPU_VS_MODULES))
def test_RNN_cpu_vs_cudnn(module, dropout, backend):
    dtype = torch.double
    mode, proj_size = CPU_VS_MODULES[module]

    def forward_backward(rnn, input_val, grad_output, weights_val, hx_val, grad_hy, cx_val=None, grad_cy=None):
        # upstream's forward_backward(cuda, ...) without the move to cuda: `rnn` is the module under test
        is_lstm = rnn.mode == "LSTM"

        for x_layer, y_layer in zip(rnn.all_weights, weights_val):
            for x, y in zip(x_layer, y_layer):
                x.data.copy_(y.data)

        if isinstance(input_val, rnn_utils.PackedSequence):
            input = rnn_utils.PackedSequence(input_val.data.data.requires_grad_(True), input_val.batch_sizes)
            input_var = input.data
        else:
            input = input_val.clone().requires_grad_(True)
            input_var = input
        if is_lstm:
            if cx_val is None:
                hx = (hx_val.clone().requires_grad_(True), hx_val.add(1).requires_grad_(True))
            else:
                hx = (hx_val.clone().requires_grad_(True), cx_val.add(1).requires_grad_(True))
        else:
            hx = hx_val.clone().requires_grad_(True)

        output, hy = rnn(input, hx)

        if isinstance(output, rnn_utils.PackedSequence):
            output = output.data

        if is_lstm:
            if grad_cy is None:
                torch.autograd.backward([output, hy[0], hy[1]], [grad_output, grad_hy, grad_hy + 1])
            else:
                torch.autograd.backward([output, hy[0], hy[1]], [grad_output, grad_hy, grad_cy + 1])
        else:
            torch.autograd.backward([output, hy], [grad_output, grad_hy])

        return {"output": output.data,
                "hy": hy[0].data if is_lstm else hy.data,
                "weights": rnn.all_weights,
                "grad_input": input_var.grad.data,
                "grad_hx": hx[0].grad.data if is_lstm else hx.grad.data,
                "cy": hy[1].data if is_lstm else None,
                "grad_cx": hx[1].grad.data if is_lstm else None}

    input_size = 10
    hidden_size = 6
    num_layers = 2
    seq_length = 7
    batch = 6

    def make_noncontig(tensor):
        ndim = tensor.dim()
        return torch.stack([tensor.clone().zero_(), tensor], ndim).select(ndim, 1)

    def compare_cpu_gpu(outputs_cpu, outputs_gpu):
        assertEqual(list(outputs_cpu.keys()), list(outputs_gpu.keys()))
        for key in outputs_cpu.keys():
            if key != "weights":
                assertEqual(outputs_cpu[key], outputs_gpu[key], atol=5e-5, rtol=0, msg=key)

        # check grad weights separately, as nested dict
        for cpu_layer_weight, gpu_layer_weight in zip(outputs_cpu["weights"], outputs_gpu["weights"]):
            for (cpu_weight, gpu_weight) in zip(cpu_layer_weight, gpu_layer_weight):
                assertEqual(cpu_weight.grad.data, gpu_weight.grad.data, atol=5e-5, rtol=0)

    if projection_unsupported(backend, proj_size):
        make(mode, backend, input_size, hidden_size, num_layers, proj_size=proj_size)  # expects the refusal
        pytest.skip(f"backend {backend} has no proj_size (its refusal was checked)")

    ran = 0
    for bias, bidirectional, batch_first, contig, variable_len, lens_as_tensor in product((True, False), repeat=6):
        num_directions = 2 if bidirectional else 1
        out_size = proj_size or hidden_size
        if batch_first:
            input_val = torch.randn(batch, seq_length, input_size, dtype=dtype)
            grad_output = torch.randn(batch, seq_length, out_size * num_directions, dtype=dtype)
        else:
            input_val = torch.randn(seq_length, batch, input_size, dtype=dtype)
            grad_output = torch.randn(seq_length, batch, out_size * num_directions, dtype=dtype)

        hx_val = torch.randn(num_layers * num_directions, batch, out_size, dtype=dtype)
        cx_val = grad_cy = None
        if proj_size:  # upstream's "checking LSTM with projections" loop
            cx_val = torch.randn(num_layers * num_directions, batch, hidden_size, dtype=dtype)
        grad_hy = torch.randn(num_layers * num_directions, batch, out_size, dtype=dtype)
        if proj_size:
            grad_cy = torch.randn(num_layers * num_directions, batch, hidden_size, dtype=dtype)

        if not contig:
            grad_output = make_noncontig(grad_output)
            grad_hy = make_noncontig(grad_hy)
            input_val = make_noncontig(input_val)  # upstream assigns this to an unused `input_var` (a slip)
            hx_val = make_noncontig(hx_val)
            if proj_size:
                grad_cy = make_noncontig(grad_cy)
                cx_val = make_noncontig(cx_val)
            assert not input_val.is_contiguous() and not hx_val.is_contiguous()

        if variable_len:
            lengths = [7, 5, 5, 2, 1, 1]
            if lens_as_tensor:
                lengths = torch.tensor(lengths, dtype=torch.long)
            input_val = rnn_utils.pack_padded_sequence(input_val, lengths, batch_first=batch_first)
            grad_output = rnn_utils.pack_padded_sequence(grad_output, lengths, batch_first=batch_first).data

        kwargs = dict(bias=bias, dropout=dropout, bidirectional=bidirectional, batch_first=batch_first)
        if proj_size:
            kwargs["proj_size"] = proj_size
        rnn = getattr(torch.nn, mode)(input_size, hidden_size, num_layers, **kwargs).to(dtype)

        outputs_cpu = forward_backward(rnn, input_val, grad_output, rnn.all_weights, hx_val, grad_hy, cx_val, grad_cy)

        rnn_gpu = make(mode, backend, input_size, hidden_size, num_layers, **kwargs).to(dtype)

        outputs_gpu = forward_backward(rnn_gpu, input_val, grad_output, rnn.all_weights, hx_val, grad_hy,
                                       cx_val, grad_cy)

        compare_cpu_gpu(outputs_cpu, outputs_gpu)
        ran += 1
    assert ran == 64


@BACKEND
@pytest.mark.parametrize("case", ["LSTM", "LSTM_proj", "GRU"])
def test_cudnn_forward_exception(case, backend):
    # upstream loops over these rnns (and nn.RNN), each with its wrong-sized hidden state
    mode, kwargs = {"LSTM": ("LSTM", {}), "LSTM_proj": ("LSTM", {"proj_size": 10}), "GRU": ("GRU", {})}[case]
    rnn = make(mode, backend, 10, 20, batch_first=True, **kwargs)
    if rnn is None:
        return
    hidden = (torch.zeros(1, 2, 19), torch.zeros(1, 2, 19)) if mode == "LSTM" else torch.zeros(1, 2, 19)
    x_wrong = torch.randn(2, 3, 3)
    x_right = torch.randn(2, 3, 10)
    assertRaisesRegex(RuntimeError, "Expected hidden.*size.*got", rnn, x_right, hidden)
    assertRaisesRegex(RuntimeError, re.escape("input.size(-1) must be equal to input_size"), rnn, x_wrong)


@BACKEND_MANY_SHAPES
@MODE
def test_RNN_input_size_zero(mode, backend):
    for device in ["cpu"]:  # upstream: get_all_device_types()
        input = torch.zeros((5, 0, 3))
        rnn = make(mode, backend, input_size=3, hidden_size=4)
        outs = rnn(input)
        assertEqual(outs[0].shape, torch.Size([5, 0, 4]))
        # backward must not hard-error
        outs[0].sum().backward()


@BACKEND
@MODE
def test_error_RNN_seq_len_zero(mode, backend):
    with set_default_dtype(torch.double):
        for bidirectional in [True, False]:
            for device in ["cpu"]:  # upstream: get_all_device_types(), under a cuDNN gate
                input = torch.ones(0, 10, 5)
                rnn = make(mode, backend, 5, 6, bidirectional=bidirectional)
                assertRaisesRegex(RuntimeError, "Expected sequence length to be larger than 0 in RNN", rnn, input)


@BACKEND
def test_rnn_weight_norm(backend):
    def check_weight_norm(l, name, num_params):
        # 'weight_ih_l0', 'weight_hh_l0', 'bias_ih_l0', 'bias_hh_l0'[, 'weight_hr_l0']
        # weight norm on one of them turns it into a plain tensor
        l = torch.nn.utils.weight_norm(l, name=name)
        assertEqual(sum(isinstance(p, torch.nn.Parameter) for p in l._flat_weights), num_params - 1)
        # removing the reparametrization restores the Parameter
        l = torch.nn.utils.remove_weight_norm(l, name=name)
        assertEqual(sum(isinstance(p, torch.nn.Parameter) for p in l._flat_weights), num_params)
        # and `_parameters` / `named_parameters` hold the original weight again, not _v / _g
        assert name in l._parameters
        assert l._parameters[name] is not None
        assert name + "_v" not in l._parameters
        assert name + "_g" not in l._parameters
        assert name in dict(l.named_parameters())
        assert dict(l.named_parameters())[name] is not None
        assert name + "_v" not in dict(l.named_parameters())
        assert name + "_g" not in dict(l.named_parameters())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # weight_norm is deprecated
        check_weight_norm(make("LSTM", backend, 32, 32), "weight_ih_l0", 4)
        lstm = make("LSTM", backend, 32, 32, proj_size=16)
        if lstm is not None:
            check_weight_norm(lstm, "weight_hr_l0", 5)


@BACKEND_MANY_SHAPES
@MODE
def test_RNN_dropout_state(mode, backend):
    # upstream: nn.RNN(100, 100, 2, bias=False, dropout=p, nonlinearity='relu'), cuda False and True
    for p in (0, 0.1234):
        for train in (True, False):
            for cuda in (False,):
                rnn = make(mode, backend, 100, 100, 2, bias=False, dropout=p)
                if train:
                    rnn.train()
                else:
                    rnn.eval()
                input = torch.rand(1, 1, 100)
                hx = torch.rand(2, 1, 100)
                if mode == "LSTM":
                    hx = (hx, torch.rand(2, 1, 100))

                output1, hy1 = rnn(input, hx)
                output2, hy2 = rnn(input, hx)

                buf = io.BytesIO()
                torch.save(rnn, buf)
                buf.seek(0)
                rnn2 = torch.load(buf, weights_only=False)
                rnn2.flatten_parameters()
                output3, hy3 = rnn2(input, hx)

                if p == 0 or not train:
                    assertEqual(output1, output2)
                    assertEqual(output1, output3)
                    assertEqual(hy1, hy2)
                    assertEqual(hy1, hy3)
                else:
                    assertNotEqual(output1, output2)
                    assertNotEqual(output1, output3)
                    assertNotEqual(hy1, hy2)
                    assertNotEqual(hy1, hy3)


@BACKEND_MANY_SHAPES
@MODE
def test_RNN_change_dropout(mode, backend):
    # upstream: nn.RNN(100, 100, 2, dropout=0, nonlinearity='relu'), cuda False and True
    with set_default_dtype(torch.double):
        for train, cuda in product((True, False), (False,)):
            rnn = make(mode, backend, 100, 100, 2, dropout=0)
            input = torch.rand(3, 2, 100)
            if train:
                rnn.train()
            else:
                rnn.eval()

            prev_output = None
            for p in (0, 0.5, 0, 0.7, 0.2, 1, 0.2, 0):
                rnn.dropout = p
                output1, hy1 = rnn(input)
                output2, hy2 = rnn(input)

                if p == 0 or p == 1 or not train:
                    assertEqual(output1, output2)
                    assertEqual(hy1, hy2)
                else:
                    assertNotEqual(output1, output2)
                    assertNotEqual(hy1, hy2)

                if prev_output is not None:
                    if not train:
                        assertEqual(output1.data, prev_output)
                        assertEqual(output2.data, prev_output)
                    else:
                        assertNotEqual(output1.data, prev_output)
                        assertNotEqual(output2.data, prev_output)
                prev_output = output1.data


# ============================ TestNNDeviceType (cpu) ===========================================

DEVICE = "cpu"


@BACKEND_MANY_SHAPES
@MODE
def test_rnn_retain_variables(mode, backend):
    device, dtype = DEVICE, torch.double  # @dtypes(torch.double) on cpu
    rnn = make(mode, backend, 10, 20, num_layers=2).to(device, dtype)
    input = torch.randn(5, 6, 10, device=device, dtype=dtype, requires_grad=True)
    output = rnn(input)
    output[0].sum().backward(retain_graph=True)
    grads = [input.grad.data.clone()] + [p.grad.data.clone() for p in rnn.parameters()]
    for _ in range(4):
        rnn.zero_grad()
        input.grad.data.zero_()
        output[0].sum().backward(retain_graph=True)
        grads2 = [input.grad.data] + [p.grad.data for p in rnn.parameters()]
        assertEqual(grads, grads2)


def _test_rnn_mod(mod, inp):
    def flatten_out(mod, inp):
        out = mod(inp)
        return tuple([t if isinstance(t, torch.Tensor) else tt for t in out for tt in t])
    gradcheckfunc = partial(flatten_out, mod)
    with torch.backends.cudnn.flags(enabled=False):
        assert gradcheck(gradcheckfunc, inp, check_batched_grad=False)
        assert gradgradcheck(gradcheckfunc, inp, check_batched_grad=False)
    # (upstream's cuDNN double-backward error-message check runs only for CUDA inputs)


@BACKEND
def test_LSTM_grad_and_gradgrad(backend):
    device, dtype = DEVICE, torch.double
    hsize = 4
    inp = torch.rand(1, 3, hsize, device=device, dtype=dtype, requires_grad=True)
    for bias in [True, False]:
        mod = make("LSTM", backend, hsize, hsize, bias=bias).to(device).to(dtype)
        _test_rnn_mod(mod, inp)


@BACKEND
def test_GRU_grad_and_gradgrad(backend):
    device, dtype = DEVICE, torch.double
    hsize = 4
    inp = torch.rand(1, 3, hsize, device=device, dtype=dtype, requires_grad=True)
    for bias in [True, False]:
        mod = make("GRU", backend, hsize, hsize, bias=bias).to(device).to(dtype)
        _test_rnn_mod(mod, inp)


@contextlib.contextmanager
def _mkldnn_enabled_restored():
    before = torch._C._get_mkldnn_enabled()
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(before)


# upstream: @onlyCUDA @dtypes(torch.float, torch.double) @tf32_on_and_off test_rnn_fused(self, device, dtype):
# nn.GRU / nn.LSTM on the CPU against the same module on `device`; here against the backend's module (CPU).
@BACKEND_MANY_SHAPES
@pytest.mark.parametrize("dtype", [torch.float, torch.double], ids=["float32", "float64"])
def test_rnn_fused(dtype, backend):
    device = DEVICE

    def copy_rnn(rnn1, rnn2):
        for x_layer, y_layer in zip(rnn1.all_weights, rnn2.all_weights):
            for x, y in zip(x_layer, y_layer):
                x.data.copy_(y.data)

    def check_rnn_grads(rnn1, rnn2):
        for x_layer, y_layer in zip(rnn1.all_weights, rnn2.all_weights):
            for x, y in zip(x_layer, y_layer):
                assertEqual(x.grad, y.grad, atol=5e-5, rtol=0)

    input_size = 10
    hidden_size = 6
    num_layers = 2
    seq_length = 7
    batch = 6
    input_val = torch.randn(seq_length, batch, input_size, dtype=dtype)
    grad_output = torch.randn(seq_length, batch, hidden_size, dtype=dtype)
    hx_val = torch.randn(num_layers, batch, hidden_size, dtype=dtype)
    grad_hy = torch.randn(num_layers, batch, hidden_size, dtype=dtype)
    with torch.backends.cudnn.flags(enabled=False, allow_tf32=None):
        for module in ("GRU", "LSTM"):  # upstream: (nn.GRU, nn.LSTM)
            for bias in (True, False):
                rnn = getattr(torch.nn, module)(input_size, hidden_size, num_layers, bias=bias).to(dtype)
                rnn_device = make(module, backend, input_size, hidden_size, num_layers, bias=bias).to(device, dtype)
                copy_rnn(rnn, rnn_device)

                is_lstm = module == "LSTM"
                if is_lstm:
                    hx = (hx_val.clone().requires_grad_(True),
                          hx_val.clone().add(1).requires_grad_(True))
                    hx_device = (hx_val.clone().to(device).requires_grad_(True),
                                 hx_val.clone().to(device).add(1).requires_grad_(True))
                else:
                    hx = hx_val.clone().requires_grad_(True)
                    hx_device = hx_val.clone().to(device).requires_grad_(True)

                inp = input_val.clone().requires_grad_(True)
                inp_cu = input_val.clone().to(device).requires_grad_(True)
                output1, hy1 = rnn(inp, hx)
                output2, hy2 = rnn_device(inp_cu, hx_device)
                if is_lstm:
                    torch.autograd.backward(
                        [output1, hy1[0], hy1[1]], [grad_output, grad_hy, grad_hy + 1]
                    )
                    torch.autograd.backward(
                        [output2, hy2[0], hy2[1]],
                        [grad_output.to(device), grad_hy.to(device), (grad_hy + 1).to(device)]
                    )
                else:
                    torch.autograd.backward([output1, hy1], [grad_output, grad_hy])
                    torch.autograd.backward([output2, hy2], [grad_output.to(device), grad_hy.to(device)])

                assertEqual(output1, output2)
                assertEqual(hy1, hy2)

                check_rnn_grads(rnn, rnn_device)
                assertEqual(inp.grad, inp_cu.grad)
                if is_lstm:
                    assertEqual(hx[0].grad, hx_device[0].grad)
                    assertEqual(hx[1].grad, hx_device[1].grad)
                else:
                    assertEqual(hx.grad, hx_device.grad)


@BACKEND_MANY_SHAPES
def test_LSTM_differentiable_backward_using_oneDNN(backend):
    batch = 10
    seq_len = 12
    input = 3
    Net = make("LSTM", backend, input, 3, 20, batch_first=True)
    Net_clone = copy.deepcopy(Net)  # noqa: F841  (as upstream)
    x = torch.rand(batch, seq_len, input)
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)

    with _mkldnn_enabled_restored():
        torch._C._set_mkldnn_enabled(False)
        out1, _ = Net(x1)
        der_out1 = torch.autograd.grad(out1, x1, grad_outputs=torch.ones_like(out1),
                                       retain_graph=True, create_graph=True)[0]
        loss1 = der_out1.sum()
        loss1.backward(retain_graph=True)

        torch._C._set_mkldnn_enabled(True)
        out2, _ = Net(x2)
        der_out2 = torch.autograd.grad(out2, x2, grad_outputs=torch.ones_like(out2),
                                       retain_graph=True, create_graph=True)[0]
        loss2 = der_out2.sum()
        loss2.backward(retain_graph=True)
    assert torch.allclose(der_out1, der_out2)
    assert torch.allclose(x1.grad, x2.grad)


VARIABLE_SEQUENCE_TESTS = [
    # enforce_sorted, lengths
    [True, [5]],
    [False, [5]],
    [True, [10, 10, 6, 2, 2, 1, 1]],
    [False, [10, 10, 6, 2, 2, 1, 1]],
    [False, [2, 1, 3, 2, 10, 5, 3]],
]


@BACKEND_MANY_SHAPES
def test_variable_sequence(backend):
    device, dtype = DEVICE, torch.float  # @dtypes(torch.float) on cpu

    def pad(var, length):
        if var.size(0) == length:
            return var
        return torch.cat([var, var.new_zeros(length - var.size(0), *var.size()[1:])])

    def maybe_index_tuple(maybe_tuple_of_tensors, index):
        if maybe_tuple_of_tensors is None:
            return None
        return tuple(maybe_tuple_of_tensors[j][:, index:index + 1, :].contiguous() for j in range(2))

    def check_lengths(lengths, enforce_sorted, use_default_hiddens, proj_size):
        input_size = 3
        hidden_size = 4
        num_layers = 2
        bidirectional = True

        max_length = max(lengths)
        x_leaf = torch.randn(max_length, len(lengths), input_size, device=device, dtype=dtype,
                             requires_grad=True)
        num_directions = 2 if bidirectional else 1
        lstm = make("LSTM", backend, input_size, hidden_size, bidirectional=bidirectional,
                    num_layers=num_layers, proj_size=proj_size)
        if lstm is None:
            return
        lstm = lstm.to(device, dtype)
        lstm2 = deepcopy(lstm).to(device, dtype)
        x = x_leaf

        hidden0 = None
        if not use_default_hiddens:
            real_hidden_size = hidden_size if proj_size == 0 else proj_size
            hidden0 = (torch.randn(num_directions * num_layers, len(lengths), real_hidden_size,
                                   device=device, dtype=dtype),
                       torch.randn(num_directions * num_layers, len(lengths), hidden_size,
                                   device=device, dtype=dtype))

        # each sequence separately
        seq_outs = []
        seq_hiddens = []
        for i, l in enumerate(lengths):
            hidden_i = maybe_index_tuple(hidden0, i)
            out, hid = lstm2(x[:l, i:i + 1], hidden_i)
            out_pad = pad(out, max_length)
            seq_outs.append(out_pad)
            seq_hiddens.append(hid)
        seq_out = torch.cat(seq_outs, 1)
        seq_hidden = tuple(torch.cat(hids, 1) for hids in zip(*seq_hiddens))

        # packed
        packed = rnn_utils.pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
        packed_out, packed_hidden = lstm(packed, hidden0)
        unpacked, unpacked_len = rnn_utils.pad_packed_sequence(packed_out)

        # forward
        prec = dtype2prec_DONTUSE[dtype]
        assertEqual(packed_hidden, seq_hidden, atol=prec, rtol=0)
        assertEqual(unpacked, seq_out, atol=prec, rtol=0)
        assertEqual(unpacked_len, lengths, atol=prec, rtol=0)

        # backward
        seq_out.sum().backward()
        grad_x = x_leaf.grad.data.clone()
        x_leaf.grad.data.zero_()
        unpacked.sum().backward()

        assertEqual(x_leaf.grad, grad_x, atol=dtype2prec_DONTUSE[dtype], rtol=0)
        for p1, p2 in zip(lstm.parameters(), lstm2.parameters()):
            prec = dtype2prec_DONTUSE[dtype]
            if dtype == torch.float16:
                prec = 4e-2
            elif dtype == torch.float32:
                prec = 2e-4
            assertEqual(p1.grad, p2.grad, atol=prec, rtol=0)

    tests = VARIABLE_SEQUENCE_TESTS
    if backend in COMPILED and not FULL:
        tests = [tests[4]]  # unsorted, variable lengths: exercises everything the others do
    for enforce_sorted, seq_lens, in tests:
        for use_default_hiddens in (True, False):
            for proj_size in [0, 2]:
                check_lengths(seq_lens, enforce_sorted, use_default_hiddens, proj_size)


@BACKEND
def test_save_lstm_compatibility(backend):
    # An LSTM pickled by PyTorch <= 1.7 (no proj_size attribute) still loads and runs.
    model = make("LSTM", backend, 2, 3)
    x = torch.randn(32, 5, 2)
    expected = model(x)

    assert model.proj_size == 0
    state_dict = model.__dict__
    del state_dict["proj_size"]

    loaded_model = make("LSTM", backend, 2, 3)
    loaded_model.__setstate__(state_dict)
    result = loaded_model(x)
    assertEqual(result, expected)
