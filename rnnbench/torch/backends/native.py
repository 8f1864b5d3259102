"""`native`: PyTorch's own fused kernels, as `nn.LSTM`/`nn.GRU` call them (`_VF.lstm` /
`_VF.gru`: cuDNN on CUDA, oneDNN or ATen on the CPU), on a `rnnbench.torch` module's
parameters.  It runs the whole stack at once (`run_stack`), not one direction, on a padded
input (packed here when it has lengths, as `nn.LSTM`'s users do) or a `PackedSequence`
(handed to the kernel as it is).
"""

from __future__ import annotations

import functools
import os
from contextlib import nullcontext
from types import SimpleNamespace

import torch
import torch.nn as nn
from torch import _VF
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from rnnbench.core.capabilities import Capabilities
from rnnbench.core.precision import isa_summary, precision

from ..precision import compute_context, storage_dtype
from ._common import under_vmap

# cell -> (its fused kernel, the mode nn.RNNBase and cuDNN call it)
KERNELS = {"lstm": (_VF.lstm, "LSTM"), "gru": (_VF.gru, "GRU")}


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


@torch.compiler.disable
@functools.lru_cache(maxsize=None)
def machine_reason(cell: str, dtype: str, device: str) -> str | None:
    """Why PyTorch's kernel for `cell` cannot compute precision `dtype` on `device` here, or None.

    Asked, not declared: which kernel `nn.LSTM` reaches depends on the CPU's instruction set and
    on oneDNN's (`ONEDNN_MAX_CPU_ISA` caps it), and oneDNN has no bfloat16 RNN primitive below
    AVX-512, so under CPU autocast bfloat16 `nn.LSTM` raises "could not create a primitive
    descriptor" on an AVX2 CPU.  The question is one forward and backward of a 4-unit module
    over 2 steps in that precision, through this rung's own kernel call (`_kernel_context`
    included), asked once per process.
    """
    if device == "cuda" and not torch.cuda.is_available():
        return None  # `unavailable_reason` answers for a device that is not here
    # whatever the caller's modes are (a module's first forward may run under no_grad, inference_mode
    # or autocast), the question is asked in its own
    with torch.inference_mode(False), torch.enable_grad(), torch.autocast(device, enabled=False):
        return _ask(cell, dtype, device)


def _ask(cell: str, dtype: str, device: str) -> str | None:
    module = getattr(nn, KERNELS[cell][1])(4, 4).to(device=device, dtype=storage_dtype(dtype))
    x = torch.ones(2, 1, 4, device=device, dtype=storage_dtype(dtype))
    try:
        with compute_context(dtype, device), _kernel_context(KERNELS[cell][0], x):
            out, _ = module(x)
        out.float().sum().backward()
    except RuntimeError as e:
        why = str(e).split(". ")[0]
        if device == "cpu" and "primitive descriptor" in why:
            compute, cap = precision(dtype).compute, os.environ.get("ONEDNN_MAX_CPU_ISA")
            short = {"bfloat16": "bf16", "float16": "fp16"}.get(compute)
            has = short is not None and getattr(torch.ops.mkldnn, f"_is_mkldnn_{short}_supported")()
            return (f"nn.{KERNELS[cell][1]}'s oneDNN kernel has no {compute} RNN primitive on this CPU "
                    f"(oneDNN's {compute} support: {'yes' if has else 'no, it needs AVX-512'}"
                    f"{f'; ONEDNN_MAX_CPU_ISA={cap} caps it' if cap else ''}; CPU flags: {isa_summary()}): {why}")
        return f"nn.{KERNELS[cell][1]} raises on this machine: {why}"
    return None


CAPABILITIES = Capabilities(
    cells=tuple(KERNELS), proj_size=True, machine=machine_reason,
    why_not={"cell": "PyTorch's fused kernels (cuDNN on CUDA, oneDNN/ATen on CPU) have only LSTM and GRU"})


def flatten_parameters(spec, weights: list) -> None:
    """`nn.LSTM.flatten_parameters` on `weights` (the stack's parameters in `state_dict` order):
    on CUDA with cuDNN, the tensors become views into one buffer in cuDNN's layout, which the
    kernel then uses without copying; a no-op elsewhere."""
    module = SimpleNamespace(_flat_weights=weights, _flat_weights_names=weights, mode=KERNELS[spec.cell][1],
                             bias=spec.bias, proj_size=spec.proj_size, input_size=spec.input_size,
                             hidden_size=spec.hidden_size, num_layers=spec.num_layers, batch_first=spec.batch_first,
                             bidirectional=spec.bidirectional)
    nn.RNNBase.flatten_parameters(module)


def run_stack(cell, spec, params, x, state: tuple, lengths, *, dropout: float = 0.0, training: bool = False):
    """`nn.LSTM.forward`'s kernel call on time-major x: padded (with `lengths`, packed for the
    kernel and padded back) or a `PackedSequence`; `state` (h0, c0) or (h0,), already checked.
    Returns (output in x's form, state tuple)."""
    if under_vmap():
        raise RuntimeError(f"backend 'native' runs aten::{cell.name} (nn.{KERNELS[cell.name][1]}'s fused kernel), "
                           "which torch.func.vmap cannot batch (PyTorch has no batching rule for it, nn."
                           f"{KERNELS[cell.name][1]} fails the same way); use backend='eager' or 'bptt' under vmap")
    if lengths is not None:
        packed = pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
        out, final = run_stack(cell, spec, params, packed, tuple(s.index_select(1, packed.sorted_indices)
                                                                    for s in state), None, dropout=dropout,
                               training=training)
        output, _ = pad_packed_sequence(out, total_length=x.shape[0])
        return output, tuple(s.index_select(1, packed.unsorted_indices) for s in final)
    weights = [params[name] for name in spec.param_shapes()]
    data = x.data if isinstance(x, PackedSequence) else x
    if data.is_cuda:
        flatten_parameters(spec, weights)
    kernel = KERNELS[cell.name][0]
    args = (spec.bias, spec.num_layers, dropout, training, spec.bidirectional)
    hx = state if len(state) == 2 else state[0]
    with _kernel_context(kernel, data):
        if isinstance(x, PackedSequence):
            out, *final = kernel(data, x.batch_sizes, hx, weights, *args)
            return PackedSequence(out, x.batch_sizes, x.sorted_indices, x.unsorted_indices), tuple(final)
        out, *final = kernel(x, hx, weights, *args, False)
    return out, tuple(final)
