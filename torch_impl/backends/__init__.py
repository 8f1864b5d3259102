"""The ladder of PyTorch backends: names, availability, and their direction functions.

Every backend except `native` is a direction function (see `_common`); `native` runs
`nn.LSTM`/`nn.GRU` itself and is dispatched by `torch_impl.modules`.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Callable

import torch

from ._common import PROJ_BACKENDS, ProjectionNotSupportedError, under_vmap

# Ladder order, slowest idea first (the registry's rungs).
BACKENDS = ("naive", "cell_loop", "jit", "eager", "compile", "autograd", "native")

_MODULES = {"naive": "torch_impl.backends.naive", "cell_loop": "torch_impl.backends.cell_loop",
            "eager": "torch_impl.backends.eager", "jit": "torch_impl.backends.jit",
            "compile": "torch_impl.backends.compiled", "autograd": "torch_impl.autograd_fn"}

# Backends that run any catalogue cell with a registered torch step (torch_impl.cells).
CUSTOM_CELL_BACKENDS = ("eager", "compile")

__all__ = ["BACKENDS", "PROJ_BACKENDS", "CUSTOM_CELL_BACKENDS", "ProjectionNotSupportedError",
           "under_vmap", "check_backend_name", "unavailable_reason", "unsupported_cell_reason", "available_backends",
           "direction_function"]


def check_backend_name(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    return name


def unavailable_reason(name: str, device: str | torch.device = "cpu") -> str | None:
    """None when backend `name` runs on `device` here, else the reason it cannot."""
    check_backend_name(name)
    device = torch.device(device)
    return _unavailable_reason(name, device.type)


@lru_cache(maxsize=None)
def _unavailable_reason(name: str, kind: str) -> str | None:
    if kind == "cuda" and not torch.cuda.is_available():
        return f"CUDA is not available here (torch {torch.__version__}, cuda build: {torch.version.cuda})"
    if kind not in ("cpu", "cuda"):
        return f"torch_impl runs on cpu and cuda, not {kind}"
    if name == "native":
        return None
    try:
        module = importlib.import_module(_MODULES[name])
    except ImportError as e:
        return f"cannot import {_MODULES[name]}: {e}"
    if name == "jit":
        return module.unavailable_reason()
    if name == "compile":
        return module.unavailable_reason(kind)
    reason_fn = getattr(module, "unavailable_reason", None)  # the autograd module may define one
    if reason_fn is not None:
        return reason_fn(kind)
    return None


def unsupported_cell_reason(name: str, cell: str) -> str | None:
    """None when backend `name` implements `cell`, else the reason it does not."""
    check_backend_name(name)
    if cell in ("lstm", "gru"):
        return None
    from .. import cells
    if not cells.has_torch_cell(cell):
        return (f"cell {cell!r} has no torch step; add one with torch_impl.register_cell({cell!r}, step)")
    if name in CUSTOM_CELL_BACKENDS:
        return None
    if name == "autograd":
        from .. import autograd_cells
        if cell in autograd_cells.CELLS:
            return None
        return (f"backend 'autograd' (hand-written BPTT) implements lstm, gru and "
                f"{', '.join(autograd_cells.CELLS)}, not {cell!r}; it runs on {', '.join(CUSTOM_CELL_BACKENDS)}")
    if name == "native":
        return (f"backend 'native' runs PyTorch's fused kernels (cuDNN on CUDA, oneDNN/ATen on CPU), "
                f"which have no {cell!r} cell; use one of {', '.join(CUSTOM_CELL_BACKENDS)}")
    return (f"backend {name!r} implements only the lstm and gru cells; {cell!r} runs on "
            f"{', '.join(CUSTOM_CELL_BACKENDS)}")


def available_backends(device: str | torch.device = "cpu") -> tuple[str, ...]:
    """The backends that run on `device` on this machine, in ladder order."""
    return tuple(b for b in BACKENDS if unavailable_reason(b, device) is None)


def direction_function(name: str) -> Callable:
    """The `run_direction` of backend `name` (not for `native`)."""
    check_backend_name(name)
    if name == "native":
        raise ValueError("the native backend runs nn.LSTM/nn.GRU as a whole, it has no direction function")
    if name == "autograd":  # dispatches lstm/gru to autograd_fn and its own catalogue cells
        return importlib.import_module("torch_impl.autograd_cells").run_direction
    return importlib.import_module(_MODULES[name]).run_direction
