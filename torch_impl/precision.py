"""`shared.precision`'s names in torch terms: the storage dtype, and autocast for mixed precision."""

from __future__ import annotations

import contextlib

import torch

from shared.precision import precision

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_NAMES = {v: k for k, v in DTYPES.items()}


def storage_dtype(name: str) -> torch.dtype:
    """The dtype parameters and inputs are stored in; ValueError naming the valid names."""
    return DTYPES[precision(name).storage]


def compute_context(name: str, device_type: str):
    """`torch.autocast(device_type, compute dtype)` for a mixed precision, else a no-op context."""
    p = precision(name)
    return torch.autocast(device_type, dtype=DTYPES[p.compute]) if p.mixed else contextlib.nullcontext()


def precision_name(weight_dtype: torch.dtype, device_type: str) -> str:
    """The precision a forward runs in: the weights' dtype, or amp_<dtype> under autocast."""
    name = _NAMES.get(weight_dtype, str(weight_dtype).removeprefix("torch."))
    if weight_dtype == torch.float32 and torch.is_autocast_enabled(device_type):
        compute = _NAMES.get(torch.get_autocast_dtype(device_type))
        if compute not in (None, "float32"):
            return f"amp_{compute}"
    return name
