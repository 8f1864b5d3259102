"""torch.fused: the C++ kernel as torch.library custom ops (the parity matrix and PyTorch's own RNN
tests run it too; here what is particular to it)."""

from __future__ import annotations

import pytest
import torch

from rnnbench import kernels
from rnnbench.torch import GRU, LSTM, UnsupportedConfigError
from rnnbench.torch.backends import fused

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.skipif(kernels.unavailable_reason() is not None,
                                 reason=f"the fused kernels cannot be built here: {kernels.unavailable_reason()}")]


def _inputs(gates, T=5, B=3, H=4, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(T, B, gates * H, generator=g, dtype=dtype, requires_grad=True),
            torch.randn(gates * H, H, generator=g, dtype=dtype, requires_grad=True),
            torch.randn(B, H, generator=g, dtype=dtype, requires_grad=True))


@pytest.mark.parametrize("lengths", [None, [5, 2, 4]])
def test_the_ops_pass_gradcheck(lengths):
    lengths = None if lengths is None else torch.tensor(lengths)
    xg, w_hh, h0 = _inputs(4)
    c0 = torch.randn_like(h0, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: tuple(fused.fused_lstm(*a, lengths)[i] for i in (0, 3, 4)),
                                    (xg, w_hh, h0, c0))
    xg, w_hh, h0 = _inputs(3)
    b_hh = torch.randn(w_hh.shape[0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: tuple(fused.fused_gru(*a, lengths)[i] for i in (0, 3)),
                                    (xg, w_hh, b_hh, h0))


def test_opcheck_schemas_fake_kernels_and_autograd_registration():
    xg, w_hh, h0 = _inputs(4)
    torch.library.opcheck(fused.fused_lstm, (xg, w_hh, h0, torch.randn_like(h0), torch.tensor([5, 1, 3])))
    xg, w_hh, h0 = _inputs(3)
    torch.library.opcheck(fused.fused_gru, (xg, w_hh, torch.randn(w_hh.shape[0], dtype=torch.float64), h0, None))


@pytest.mark.parametrize("lengths", [None, [5, 2, 4]])
def test_the_ops_pass_gradgradcheck(lengths):
    """Double backward runs the recurrence recorded by autograd (the kernel's backward is not
    differentiable): the same function, so its gradients are the kernel's."""
    lengths = None if lengths is None else torch.tensor(lengths)
    xg, w_hh, h0 = _inputs(4, T=4, B=3, H=3)
    c0 = torch.randn_like(h0, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda *a: tuple(fused.fused_lstm(*a, lengths)[i] for i in (0, 3, 4)),
                                        (xg, w_hh, h0, c0))
    xg, w_hh, h0 = _inputs(3, T=4, B=3, H=3)
    b_hh = torch.randn(w_hh.shape[0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda *a: tuple(fused.fused_gru(*a, lengths)[i] for i in (0, 3)),
                                        (xg, w_hh, b_hh, h0))


@pytest.mark.parametrize("cls", [LSTM, GRU])
def test_torch_compile_traces_through_the_custom_op(cls):
    torch.manual_seed(0)
    rnn = cls(3, 4, num_layers=2, bidirectional=True, backend="fused")
    x = torch.randn(6, 2, 3)
    want = rnn(x)[0]
    compiled = torch.compile(rnn, backend="aot_eager", fullgraph=True)
    got = compiled(x)[0]
    torch.testing.assert_close(got, want)
    got.sum().backward()  # the registered autograd formula under the compiled graph
    assert all(p.grad is not None for p in rnn.parameters())


def test_what_the_kernel_does_not_compute_is_refused_with_the_reason():
    with pytest.raises(UnsupportedConfigError, match="no output projection"):
        LSTM(3, 4, proj_size=2, backend="fused")
    rnn = LSTM(3, 4, backend="fused").to(torch.bfloat16)
    with pytest.raises(UnsupportedConfigError, match="float32 and float64"):
        rnn(torch.randn(2, 1, 3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="does not match weight dtype"):  # nn.LSTM's own check and words
        LSTM(3, 4, backend="fused")(torch.randn(2, 1, 3, dtype=torch.float64))


def test_a_non_contiguous_input_gives_the_contiguous_result():
    torch.manual_seed(0)
    rnn = GRU(3, 4, backend="fused")
    x = torch.randn(2, 6, 3).transpose(0, 1)  # (T, B, I) view, not contiguous
    assert not x.is_contiguous()
    torch.testing.assert_close(rnn(x)[0], rnn(x.contiguous())[0])
