"""The ladder of JAX backends: names, declarations, availability and the one capability check.

One module per rung, `backends/<name>.py`, each with its `CAPABILITIES` (and its keyword
`OPTIONS`) next to its code; the ladder's order is the registry's
(`rnnbench.core.registry.keys("jax")`), so a new rung is its module and its registry row.  A rung
runs one layer in one direction (`run_direction`: `naive`, `scan`, `bptt`, `flax_nnx`),
composed over layers and directions by `rnnbench.jax.stack`, or a whole stack (`run_stack`:
`flax_linen`, Flax's `nn.Bidirectional`; `cudnn`, one kernel call).

The functions below are `rnnbench.torch.backends`' too, under the same names and arguments:
`check_backend_name`, `backend_module`, `capabilities`, `unavailable_reason`,
`unsupported_reason` (the whole question: `rnnbench.core.capabilities.Capabilities.refusal`),
`unsupported_cell_reason`, `gradient_reason`, `available_backends`.
"""

from __future__ import annotations

import importlib

from rnnbench.core import registry
from rnnbench.core.capabilities import (
    ANY_CELL, BackendUnavailableError, Capabilities, Ladder, UnknownBackendError, UnsupportedConfigError)

from ..cells import CELLS

# Ladder order, slowest idea first: the registry's rows.
BACKENDS = registry.keys("jax")
MODULES = {name: importlib.import_module(f"{__name__}.{name}") for name in BACKENDS}

# Derived from the declarations: the rungs with proj_size, and those that run every cell with a step.
PROJ_BACKENDS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.proj_size)
CUSTOM_CELL_BACKENDS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.cells == ANY_CELL)

DEVICES = {"cpu": "cpu", "cuda": "cuda", "gpu": "cuda"}  # the project's device names ("gpu" is JAX's for cuda)
LADDER = Ladder("jax", MODULES, CELLS, DEVICES)

__all__ = ["BACKENDS", "MODULES", "LADDER", "PROJ_BACKENDS", "CUSTOM_CELL_BACKENDS", "UnknownBackendError",
           "BackendUnavailableError", "UnsupportedConfigError", "check_backend_name",
           "backend_module", "capabilities", "unavailable_reason", "refusal", "unsupported_reason",
           "unsupported_cell_reason", "gradient_reason", "available_backends"]

# The capability check, the same functions as rnnbench.torch.backends' (`rnnbench.core.capabilities.Ladder`).
check_backend_name = LADDER.check_name
refusal = LADDER.refusal
unsupported_reason = LADDER.unsupported_reason
unsupported_cell_reason = LADDER.unsupported_cell_reason
gradient_reason = LADDER.gradient_reason


def backend_module(name: str):
    return MODULES[check_backend_name(name)]


def capabilities(name: str) -> Capabilities:
    return backend_module(name).CAPABILITIES


def _has_platform(device: str) -> str | None:
    import jax

    try:
        jax.devices({"cuda": "gpu"}.get(device, device))
    except RuntimeError as e:
        return f"JAX has no {device} device here ({e})"
    return None


def unavailable_reason(name: str, device: str | None = None) -> str | None:
    """None when backend `name` runs here (on `device`, "cpu" or "cuda", when given), else why not."""
    name = check_backend_name(name)
    module = MODULES[name]
    if device is not None:
        if device not in DEVICES:
            return f"device must be one of {', '.join(DEVICES)}, got {device!r}"
        device = DEVICES[device]
        reason = module.CAPABILITIES.device_reason(f"jax.{name}", device) or _has_platform(device)
        if reason is not None:
            return reason
    reason_fn = getattr(module, "unavailable_reason", None)
    return None if reason_fn is None else reason_fn(device)


def available_backends(device: str | None = None) -> tuple[str, ...]:
    """The backends that run here (on `device` when given), in ladder order."""
    return tuple(name for name in BACKENDS if unavailable_reason(name, device) is None)
