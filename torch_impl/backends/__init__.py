"""The ladder of PyTorch backends: names, declarations and availability.

One module per rung, each with its `CAPABILITIES` next to its code; every rung but
`native` is a direction function composed by `torch_impl.driver`.  `ALIASES` keeps the
older names working (`autograd` is now `bptt`, the name JAX uses too).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from shared.capabilities import Capabilities

from . import bptt, cell_loop, eager, jit, naive, native
from . import compile as compile_
from . import scan
from ._common import ProjectionNotSupportedError, under_vmap

# Ladder order, slowest idea first (the registry's rungs).
MODULES = {"naive": naive, "cell_loop": cell_loop, "jit": jit, "eager": eager, "compile": compile_,
           "scan": scan, "bptt": bptt, "native": native}
BACKENDS = tuple(MODULES)
ALIASES = {"autograd": "bptt"}

# Derived from the declarations, kept for callers of the earlier names.
PROJ_BACKENDS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.proj_size)
CUSTOM_CELL_BACKENDS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.cells == "any")
# The torch.compile rungs: each new configuration costs a compile (seconds), and they take
# torch.compile's options (`options(name)`).
COMPILED_BACKENDS = tuple(n for n, m in MODULES.items() if getattr(m, "COMPILED", False))

__all__ = ["BACKENDS", "ALIASES", "MODULES", "PROJ_BACKENDS", "CUSTOM_CELL_BACKENDS", "COMPILED_BACKENDS",
           "ProjectionNotSupportedError",
           "under_vmap", "check_backend_name", "backend_module", "capabilities", "options", "check_options",
           "unavailable_reason", "unsupported_cell_reason", "available_backends"]


def check_backend_name(name: str) -> str:
    """The backend's name (an alias resolved); ValueError naming the valid ones."""
    name = ALIASES.get(name, name)
    if name not in MODULES:
        raise ValueError(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)} "
                         f"(aliases: {', '.join(f'{a} = {b}' for a, b in ALIASES.items())})")
    return name


def backend_module(name: str):
    return MODULES[check_backend_name(name)]


def capabilities(name: str) -> Capabilities:
    return backend_module(name).CAPABILITIES


def options(name: str) -> dict:
    """Backend `name`'s options and their defaults (`backend_options=` of the modules)."""
    return dict(getattr(backend_module(name), "OPTIONS", {}))


def check_options(name: str, given) -> dict:
    """`given` with the defaults filled in; TypeError naming an option backend `name` does not
    have, ValueError for a bad value (as `jax_impl`'s backends)."""
    name = check_backend_name(name)
    given = dict(given or {})
    check = getattr(MODULES[name], "check_options", None)
    if check is not None:
        return check(name, given)
    if given:
        raise TypeError(f"backend {name!r} got unknown options {sorted(given)}; its options: "
                        f"{', '.join(options(name)) or 'none'}")
    return {}


def unavailable_reason(name: str, device: str | torch.device = "cpu") -> str | None:
    """None when backend `name` runs on `device` here, else the reason it cannot."""
    name = check_backend_name(name)
    return _unavailable_reason(name, torch.device(device).type)


@lru_cache(maxsize=None)
def _unavailable_reason(name: str, kind: str) -> str | None:
    if kind == "cuda" and not torch.cuda.is_available():
        return f"CUDA is not available here (torch {torch.__version__}, cuda build: {torch.version.cuda})"
    if kind not in MODULES[name].CAPABILITIES.devices:
        return f"torch.{name} runs on {', '.join(MODULES[name].CAPABILITIES.devices)}, not {kind}"
    reason_fn = getattr(MODULES[name], "unavailable_reason", None)
    return None if reason_fn is None else reason_fn(kind)


def unsupported_cell_reason(name: str, cell: str) -> str | None:
    """None when backend `name` implements `cell`, else the reason it does not."""
    from ..cells import has_torch_cell
    name = check_backend_name(name)
    if not has_torch_cell(cell):
        return f"cell {cell!r} has no torch step; add one with torch_impl.register_cell({cell!r}, step)"
    runs_it = [n for n, m in MODULES.items() if m.CAPABILITIES.runs_cell(cell, has_torch_cell)]
    return MODULES[name].CAPABILITIES.refuse_cell(f"torch.{name}", cell, has_torch_cell, runs_it)


def available_backends(device: str | torch.device = "cpu") -> tuple[str, ...]:
    """The backends that run on `device` on this machine, in ladder order."""
    return tuple(b for b in BACKENDS if unavailable_reason(b, device) is None)
