"""`rnnbench.core.precision`'s names in torch terms: the storage dtype, and autocast for mixed precision."""

from __future__ import annotations

import contextlib

import torch

from rnnbench.core.precision import precision

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_NAMES = {v: k for k, v in DTYPES.items()}


def storage_dtype(name: str) -> torch.dtype:
    """The dtype parameters and inputs are stored in; ValueError naming the valid names."""
    return DTYPES[precision(name).storage]


@contextlib.contextmanager
def ieee_float32():
    """cuDNN and cuBLAS compute float32 as float32, not TF32, inside this context.

    PyTorch lets cuDNN use TF32 by default (`torch.backends.cudnn.allow_tf32`), so on an
    Ampere or newer GPU `nn.LSTM` in "float32" carries about 10 mantissa bits: more than a
    hundred times the float32 bound, and not the arithmetic the other rungs do.  Both flags
    are restored on exit.  No effect on the CPU.
    """
    # set_flags, not attribute assignment: PyTorch's own test harness freezes the cuDNN
    # attributes (torch.backends.disable_global_flags), and the peer suites run under it.
    cudnn_tf32, matmul_tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.set_flags(_allow_tf32=False, _fp32_precision=None)
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.set_flags(_allow_tf32=cudnn_tf32, _fp32_precision=None)
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32


def compute_context(name: str, device_type: str):
    """The precision `name` in force: IEEE float32 (`ieee_float32`), plus
    `torch.autocast(device_type, compute dtype)` for a mixed precision.  A backward run
    outside it (autocast's recipe) takes `ieee_float32()` alone."""
    p = precision(name)
    stack = contextlib.ExitStack()
    stack.enter_context(ieee_float32())
    if p.mixed:
        stack.enter_context(torch.autocast(device_type, dtype=DTYPES[p.compute]))
    return stack


def precision_name(weight_dtype: torch.dtype, device_type: str) -> str:
    """The precision a forward runs in: the weights' dtype, or amp_<dtype> under autocast."""
    name = _NAMES.get(weight_dtype, str(weight_dtype).removeprefix("torch."))
    if weight_dtype == torch.float32 and torch.is_autocast_enabled(device_type):
        compute = _NAMES.get(torch.get_autocast_dtype(device_type))
        if compute not in (None, "float32"):
            return f"amp_{compute}"
    return name
