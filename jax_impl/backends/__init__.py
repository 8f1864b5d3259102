"""The ladder of JAX backends: names, declarations and availability.

One module per rung, each with its `CAPABILITIES` next to its code.  `naive`, `scan`,
`bptt` and `flax_nnx` run one direction at a time (`run_direction`), composed over layers
and directions by `jax_impl.driver`; `flax_linen` (its `nn.Bidirectional`) and `cudnn`
(one kernel call) run a whole stack (`run_stack`).  The rungs kept their names; the older
keyword `impl=` is the alias of `backend=` (`resolve_backend`).
"""

from __future__ import annotations

from shared.capabilities import ANY_CELL, Capabilities

from .. import cells
from ..driver import ImplUnavailableError, UnknownImplError, UnsupportedConfigError
from . import bptt, cudnn, flax_linen, flax_nnx, naive, scan
from ._common import cell_refusal, declared_reason

# The order `jax_impl.IMPLS` has always had (the registry's rungs order the ladder).
MODULES = {"naive": naive, "scan": scan, "bptt": bptt, "flax_linen": flax_linen, "flax_nnx": flax_nnx,
           "cudnn": cudnn}
BACKENDS = tuple(MODULES)
ALIASES: dict[str, str] = {}  # earlier backend names (none so far in JAX)

# Derived from the declarations, kept for callers of the earlier names.
IMPLS = BACKENDS
GENERIC_CELLS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.cells == ANY_CELL)
PROJ_BACKENDS = tuple(n for n, m in MODULES.items() if m.CAPABILITIES.proj_size)

# Backend-named aliases of the exception classes.
UnknownBackendError = UnknownImplError
BackendUnavailableError = ImplUnavailableError

__all__ = ["BACKENDS", "ALIASES", "MODULES", "IMPLS", "GENERIC_CELLS", "PROJ_BACKENDS", "resolve_backend",
           "check_backend_name", "backend_module", "capabilities", "unavailable_reason", "unsupported_cell_reason",
           "unsupported_reason", "gradient_reason", "available_backends", "UnknownBackendError",
           "BackendUnavailableError", "UnsupportedConfigError"]


def resolve_backend(backend: str | None, impl: str | None, default: str = "scan") -> str:
    """The backend asked for with `backend=` or its older alias `impl=` (both given: TypeError)."""
    if impl is not None:
        if backend is not None:
            raise TypeError(f"give backend= or its alias impl=, not both (got backend={backend!r}, impl={impl!r})")
        return impl
    return default if backend is None else backend


def check_backend_name(name: str) -> str:
    """The backend's name (an alias resolved); `UnknownImplError` naming the valid ones."""
    name = ALIASES.get(name, name) if isinstance(name, str) else name
    if not isinstance(name, str) or name not in MODULES:
        raise UnknownImplError(f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    return name


def backend_module(name: str):
    return MODULES[check_backend_name(name)]


def capabilities(name: str) -> Capabilities:
    return backend_module(name).CAPABILITIES


def _has_platform(device: str) -> str | None:
    import jax

    platform = {"cuda": "gpu"}.get(device, device)
    try:
        jax.devices(platform)
    except RuntimeError as e:
        return f"JAX has no {device} device here ({e})"
    return None


def unavailable_reason(name: str, device: str | None = None) -> str | None:
    """None when backend `name` runs here (on `device`, "cpu" or "cuda", when given), else why not."""
    module = backend_module(name)
    if device is not None:
        caps = module.CAPABILITIES
        if device not in caps.devices:
            why = caps.why_not.get("device")
            return f"jax.{check_backend_name(name)} runs only on {', '.join(caps.devices)}, not {device}" + (
                f": {why}" if why else "")
        reason = _has_platform(device)
        if reason is not None:
            return reason
    return module.unavailable_reason()


def available_backends(device: str | None = None) -> tuple[str, ...]:
    """The backends that run here (on `device` when given), in `BACKENDS` order."""
    return tuple(name for name in BACKENDS if unavailable_reason(name, device) is None)


def unsupported_cell_reason(name: str, cell: str, *, label: str | None = None) -> str | None:
    """None when backend `name` computes `cell`, else why not (starting with `label`, default
    "jax.<name>") and which backends do."""
    name = check_backend_name(name)
    runs_it = [n for n, m in MODULES.items() if m.CAPABILITIES.runs_cell(cell, cells.has_cell)]
    return cell_refusal(label or f"jax.{name}", MODULES[name].CAPABILITIES, cell, runs_it)


def unsupported_reason(name: str, spec, *, lengths: bool = False, dtype: str = "float32",
                       device: str | None = None, label: str | None = None) -> str | None:
    """None when backend `name` computes this configuration (its declaration), else why not."""
    name = check_backend_name(name)
    return (unsupported_cell_reason(name, spec.cell, label=label)
            or declared_reason(name, MODULES[name].CAPABILITIES, spec, lengths=lengths, dtype=dtype, device=device))


def gradient_reason(name: str, spec) -> str | None:
    """None when backend `name` computes every gradient of this configuration, else why not
    (a backend may run a configuration whose gradients it cannot give: the parity matrix
    and the study, which check every gradient, must not ask it; see `flax_nnx`)."""
    check = getattr(backend_module(name), "gradient_reason", None)
    return None if check is None else check(spec)
