"""`native`: PyTorch's own fused kernels, as `nn.LSTM`/`nn.GRU` call them (`_VF.lstm` /
`_VF.gru`: cuDNN on CUDA, oneDNN or ATen on the CPU), on a `torch_impl` module's
parameters.  It runs the whole stack at once (`run_module`), not one direction.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import _VF

from shared.capabilities import Capabilities

from ._common import under_vmap

KERNELS = {"lstm": _VF.lstm, "gru": _VF.gru}
CAPABILITIES = Capabilities(
    cells=tuple(KERNELS), proj_size=True,
    why_not={"cell": "PyTorch's fused kernels (cuDNN on CUDA, oneDNN/ATen on CPU) have only LSTM and GRU"})


class _WithoutOneDNN:
    """Routes the kernel call to ATen's own implementation instead of oneDNN's."""

    def __enter__(self):
        self.was = torch._C._get_mkldnn_enabled()
        torch._C._set_mkldnn_enabled(False)

    def __exit__(self, *exc):
        torch._C._set_mkldnn_enabled(self.was)


def _kernel_context(kernel, x):
    # PyTorch 2.13 sends an LSTM under CPU autocast float16 with gradients enabled to oneDNN on CPUs
    # with AVX512-FP16, and oneDNN has no such primitive: nn.LSTM itself raises "could not create a
    # primitive descriptor for the LSTM forward propagation primitive" there.  ATen's own kernel,
    # the one every other CPU runs in this mode, computes it; so the rung gives one answer on all CPUs.
    if (kernel is _VF.lstm and not x.is_cuda and torch.is_grad_enabled()
            and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16):
        return _WithoutOneDNN()
    return nullcontext()


def run_module(module, x, batch_sizes, hx):
    """`nn.LSTM.forward`'s kernel call: x padded (batch_sizes None) or packed data; hx a tuple
    (h0, c0) or (h0,), already checked.  Returns (output, state tuple)."""
    if under_vmap():
        raise RuntimeError(f"backend 'native' runs aten::{module.cell} (nn.{module.mode}'s fused kernel), which "
                           "torch.func.vmap cannot batch (PyTorch has no batching rule for it, nn."
                           f"{module.mode} fails the same way); use backend='eager' or 'bptt' under vmap")
    if x.is_cuda:
        module.flatten_parameters()
    kernel = KERNELS[module.cell]
    args = (module.bias, module.num_layers, module.dropout, module.training, module.bidirectional)
    state = hx if len(hx) == 2 else hx[0]
    with _kernel_context(kernel, x):
        if batch_sizes is None:
            out, *final = kernel(x, state, module._flat_weights, *args, module.batch_first)
        else:
            out, *final = kernel(x, batch_sizes, state, module._flat_weights, *args)
    return out, tuple(final)
