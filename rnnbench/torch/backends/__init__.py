"""The ladder of PyTorch backends: names, declarations, availability and the one capability check.

One module per rung, `backends/<name>.py`, each with its `CAPABILITIES` next to its code; the
ladder's order is the registry's (`rnnbench.core.registry.keys("torch")`), so a new rung is its module
and its registry row.  A rung runs one layer in one direction (`run_direction`), composed over
layers and directions by `rnnbench.torch.stack`, or a whole stack (`run_stack`: `native`).

The functions below are `rnnbench.jax.backends`' too, under the same names and arguments:
`check_backend_name`, `backend_module`, `capabilities`, `unavailable_reason`,
`unsupported_reason` (the whole question: `rnnbench.core.capabilities.Capabilities.refusal`),
`unsupported_cell_reason`, `gradient_reason`, `available_backends`.
"""

from __future__ import annotations

import importlib
from functools import lru_cache

import torch

from rnnbench.core import registry
from rnnbench.core.capabilities import (
    ANY_CELL, BackendUnavailableError, Capabilities, Ladder, UnknownBackendError, UnsupportedConfigError)

from ..cells import CELLS
from ._common import ProjectionNotSupportedError, under_vmap

# Ladder order, slowest idea first: the registry's rows.
BACKENDS = registry.keys("torch")
MODULES = {name: importlib.import_module(f"{__name__}.{name}") for name in BACKENDS}
LADDER = Ladder("torch", MODULES, CELLS)

# Derived from the declarations: the rungs with proj_size, and those that run every cell with a step.
PROJ_BACKENDS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.proj_size)
CUSTOM_CELL_BACKENDS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.cells == ANY_CELL)
# The torch.compile rungs: each new configuration costs a compile (seconds), and they take
# torch.compile's options (`options(name)`).
COMPILED_BACKENDS = tuple(n for n, m in MODULES.items() if getattr(m, "COMPILED", False))

__all__ = ["BACKENDS", "MODULES", "LADDER", "PROJ_BACKENDS", "CUSTOM_CELL_BACKENDS", "COMPILED_BACKENDS",
           "ProjectionNotSupportedError", "UnknownBackendError", "BackendUnavailableError", "UnsupportedConfigError",
           "under_vmap", "check_backend_name", "backend_module", "capabilities", "options", "check_options",
           "unavailable_reason", "refusal", "unsupported_reason", "unsupported_cell_reason", "gradient_reason",
           "available_backends"]


# The capability check, the same functions as rnnbench.jax.backends' (`rnnbench.core.capabilities.Ladder`).
check_backend_name = LADDER.check_name
refusal = LADDER.refusal
unsupported_reason = LADDER.unsupported_reason
unsupported_cell_reason = LADDER.unsupported_cell_reason
gradient_reason = LADDER.gradient_reason


def backend_module(name: str):
    return MODULES[check_backend_name(name)]


def capabilities(name: str) -> Capabilities:
    return backend_module(name).CAPABILITIES


def options(name: str) -> dict:
    """Backend `name`'s options and their defaults (`backend_options=` of the modules)."""
    return dict(getattr(backend_module(name), "OPTIONS", {}))


def check_options(name: str, given) -> dict:
    """`given` with the defaults filled in; TypeError naming an option backend `name` does not
    have, ValueError for a bad value (as `rnnbench.jax`'s backends)."""
    name = check_backend_name(name)
    given = dict(given or {})
    check = getattr(MODULES[name], "check_options", None)
    if check is not None:
        return check(name, given)
    if given:
        raise TypeError(f"backend {name!r} got unknown options {sorted(given)}; its options: "
                        f"{', '.join(options(name)) or 'none'}")
    return {}


def unavailable_reason(name: str, device: str | torch.device | None = None) -> str | None:
    """None when backend `name` runs on `device` (default the CPU) here, else the reason it cannot."""
    name = check_backend_name(name)
    return _unavailable_reason(name, torch.device(device or "cpu").type)


@lru_cache(maxsize=None)
def _unavailable_reason(name: str, kind: str) -> str | None:
    reason = MODULES[name].CAPABILITIES.device_reason(f"torch.{name}", kind)
    if reason is not None:
        return reason
    if kind == "cuda" and not torch.cuda.is_available():
        return f"CUDA is not available here (torch {torch.__version__}, cuda build: {torch.version.cuda})"
    reason_fn = getattr(MODULES[name], "unavailable_reason", None)
    return None if reason_fn is None else reason_fn(kind)


def available_backends(device: str | torch.device | None = None) -> tuple[str, ...]:
    """The backends that run on `device` (default the CPU) here, in ladder order."""
    return tuple(b for b in BACKENDS if unavailable_reason(b, device) is None)
