"""What a rung runs, declared once, next to its code, and the one check that reads it.

Every backend module of `rnnbench.torch.backends` and `rnnbench.jax.backends` has a module-level
`CAPABILITIES = Capabilities(...)`.  `Capabilities.refusal` answers the whole question a
caller asks before running a rung -- this cell (with a step in the framework's cell
table?), these options (proj_size, variable lengths, bidirectional), this precision, this
device -- and writes every reason sentence; each framework's `backends` package asks it
through `unsupported_reason(name, spec, ...)`, and the registry, the adapters, the modules,
the study and asv ask that.  `tests/cross/test_capabilities.py` runs each declaration
against the rung.

The errors a framework raises on a refusal are defined here too, so that both frameworks
raise the same classes under the same names: `UnknownBackendError` (a name that is not a
rung), `BackendUnavailableError` (a rung that cannot run here) and `UnsupportedConfigError`
(a configuration the rung does not compute).

Framework-neutral: no torch or jax here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from . import precision
from .catalogue import get_cell
from .spec import RNNSpec

ANY_CELL = "any"  # every catalogue cell with a step in the framework's cell table


class UnknownBackendError(ValueError):
    """A backend name that is not one of the framework's `BACKENDS`."""


class BackendUnavailableError(RuntimeError):
    """The backend exists but cannot run here (e.g. cuDNN without a GPU); the message says why."""


class UnsupportedConfigError(ValueError, RuntimeError):
    """The backend does not compute this configuration (e.g. proj_size with Flax's cells).

    A ValueError that is also a RuntimeError: `nn.LSTM` raises RuntimeError for a dtype its
    kernels lack, and a drop-in's callers may catch either."""


class Refusal(NamedTuple):
    """Why a rung does not compute a configuration: `what` names the part of the question
    ("cell", "dtype", "device", "proj_size", "lengths", "bidirectional", "machine"), `reason`
    the sentence."""

    what: str
    reason: str


@dataclass(frozen=True)
class Capabilities:
    """The configurations one rung computes.

    `cells` is a tuple of cell names, or `ANY_CELL`: every cell the framework has a step
    for (a user's own included).  `why_not` gives the reason shown when a request falls
    outside the declaration, keyed by "cell", "dtype", "device", "proj_size", "lengths",
    "bidirectional" (a generic sentence is used for a missing key).

    `machine` is what cannot be declared because it depends on the CPU's instruction set or
    the library's build (oneDNN has no bfloat16 RNN primitive without AVX-512, say):
    `machine(cell, dtype, device)` asks this machine, by a tiny call cached for the process,
    and returns why the rung cannot compute it here, or None.  It is asked last, only for a
    configuration the declaration allows.  docs/capabilities.md lists every such question.
    """

    cells: tuple[str, ...] | str = ANY_CELL
    dtypes: tuple[str, ...] = precision.ALL  # precision names (`rnnbench.core.precision`)
    devices: tuple[str, ...] = ("cpu", "cuda")
    proj_size: bool = False
    lengths: bool = True
    bidirectional: bool = True
    why_not: Mapping[str, str] = field(default_factory=dict)
    machine: Callable[[str, str, str], str | None] | None = field(default=None, compare=False)

    def runs_cell(self, cell: str, has_step=None) -> bool:
        """Whether this rung computes `cell`; `has_step(cell)` asks the framework's cell table
        (a `rnnbench.core.catalogue.CellTable` or its `has`)."""
        if self.cells == ANY_CELL:
            return _has_step(has_step)(cell)
        return cell in self.cells

    def refusal(self, label: str, spec: RNNSpec, *, lengths: bool = False, dtype: str | None = None,
                device: str | None = None, cells=None, ladder: Mapping[str, Capabilities] | None = None
                ) -> Refusal | None:
        """None when `label` (e.g. "torch.eager") computes this configuration, else what and why.

        The whole question, in this order: the cell (`cells`, the framework's
        `rnnbench.core.catalogue.CellTable`, says which cells have a step; `ladder`, the framework's
        declarations by rung name, names the rungs that run a refused cell), the precision
        `dtype` (when given), the `device` (when given) and whether it has arithmetic for
        `dtype`, then proj_size, variable `lengths` and bidirectional, and last (with `dtype`
        and `device` given) what this machine can compute (`machine`).
        """
        get_cell(spec.cell)  # an unknown cell raises naming the catalogue
        reason = self.cell_reason(label, spec.cell, cells, ladder)
        if reason is not None:
            return Refusal("cell", reason)
        if dtype is not None:
            precision.precision(dtype)  # an unknown dtype raises naming the valid ones
            if dtype not in self.dtypes:
                return Refusal("dtype", self.explain("dtype", f"{label} supports dtypes {', '.join(self.dtypes)}, "
                                                              f"not {dtype}"))
        reason = self.device_reason(label, device)
        if reason is not None:
            return Refusal("device", reason)
        if dtype is not None:
            reason = precision.device_reason(dtype, device)
            if reason is not None:
                return Refusal("device", f"{label} cannot run {dtype} on {device}: {reason}")
        if spec.proj_size and not self.proj_size:
            return Refusal("proj_size", self.explain("proj_size", f"{label} does not support proj_size"))
        if lengths and not self.lengths:
            return Refusal("lengths", self.explain("lengths", f"{label} does not support variable lengths"))
        if spec.bidirectional and not self.bidirectional:
            return Refusal("bidirectional", self.explain("bidirectional", f"{label} does not support bidirectional"))
        if self.machine is not None and dtype is not None and device is not None:
            reason = self.machine(spec.cell, dtype, device)
            if reason is not None:
                return Refusal("machine", f"{label} cannot run {dtype} on this {device}: {reason}")
        return None

    def unsupported_reason(self, label: str, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float32",
                           device: str | None = None, has_step=None, cells=None,
                           ladder: Mapping[str, Capabilities] | None = None) -> str | None:
        """`refusal`'s sentence: None when `label` computes this configuration, else why not.
        (`has_step`: a cell table's `has`, for callers without the table.)"""
        refused = self.refusal(label, spec, lengths=lengths, dtype=dtype, device=device,
                               cells=cells if cells is not None else has_step, ladder=ladder)
        return None if refused is None else refused.reason

    def device_reason(self, label: str, device: str | None) -> str | None:
        """None when the declaration includes `device` (or none is asked about), else the
        sentence every caller shows: "<label> runs only on cpu, cuda, not <device>"."""
        if device is None or device in self.devices:
            return None
        return self.explain("device", f"{label} runs only on {', '.join(self.devices)}, not {device}")

    def cell_reason(self, label: str, cell: str, cells=None, ladder: Mapping[str, Capabilities] | None = None
                    ) -> str | None:
        """None when this rung computes `cell`, else why not, in the one wording both
        frameworks use: "<label> implements only lstm, gru, not 'x' (why); 'x' runs on a, b",
        or, for a rung that runs every cell with a step, what to register."""
        if self.runs_cell(cell, cells):
            return None
        if self.cells == ANY_CELL:
            missing = getattr(cells, "missing_reason", None)
            return missing(cell) if missing else f"{label} runs every cell with a step, and {cell!r} has none"
        why = self.why_not.get("cell")
        reason = f"{label} implements only {', '.join(self.cells)}, not {cell!r}" + (f" ({why})" if why else "")
        runs_it = [name for name, caps in (ladder or {}).items() if caps.runs_cell(cell, cells)]
        return reason + (f"; {cell!r} runs on {', '.join(runs_it)}" if runs_it else "")

    def explain(self, key: str, generic: str) -> str:
        """`generic`, with the declared reason for `key` appended when there is one."""
        extra = self.why_not.get(key)
        return f"{generic}: {extra}" if extra else generic

    def to_dict(self) -> dict:
        return {"cells": self.cells if self.cells == ANY_CELL else list(self.cells), "dtypes": list(self.dtypes),
                "devices": list(self.devices), "proj_size": self.proj_size, "lengths": self.lengths,
                "bidirectional": self.bidirectional}


def _has_step(cells):
    """`cells` as a predicate: a cell table (its `has`), a callable, or None (every cell has one)."""
    if cells is None:
        return lambda cell: True
    return getattr(cells, "has", cells)


class Ladder:
    """One framework's rungs, by name in ladder order, and the capability check its `backends`
    package exposes: `rnnbench.torch.backends` and `rnnbench.jax.backends` each make one from their
    rung modules (each with its `CAPABILITIES`) and their cell table, so the two packages
    answer the same questions with the same code.

    `devices` maps a framework's device names to the project's
    ("gpu" -> "cuda" in JAX).
    """

    def __init__(self, framework: str, modules: Mapping, cells, devices: Mapping[str, str] | None = None):
        self.framework, self.modules, self.cells = framework, dict(modules), cells
        self.devices = dict(devices or {})
        self.declarations = {name: module.CAPABILITIES for name, module in self.modules.items()}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.modules)

    def check_name(self, name: str) -> str:
        """The rung's name; `UnknownBackendError` (a ValueError) naming the valid ones."""
        if not isinstance(name, str) or name not in self.modules:
            raise UnknownBackendError(f"unknown backend {name!r}; valid backends: {', '.join(self.modules)}")
        return name

    def refusal(self, name: str, spec: RNNSpec, *, lengths: bool = False, dtype: str | None = None,
                device: str | None = None) -> Refusal | None:
        """None when rung `name` computes this configuration (its declaration), else what and why."""
        name = self.check_name(name)
        return self.declarations[name].refusal(f"{self.framework}.{name}", spec, lengths=lengths, dtype=dtype,
                                               device=self.devices.get(device, device), cells=self.cells,
                                               ladder=self.declarations)

    def unsupported_reason(self, name: str, spec: RNNSpec, *, lengths: bool = False, dtype: str | None = None,
                           device: str | None = None) -> str | None:
        """`refusal`'s sentence: None when rung `name` computes this configuration, else why not."""
        refused = self.refusal(name, spec, lengths=lengths, dtype=dtype, device=device)
        return None if refused is None else refused.reason

    def unsupported_cell_reason(self, name: str, cell: str) -> str | None:
        """None when rung `name` implements `cell`, else the reason it does not (asked by name
        only: a cell the catalogue does not know yet is refused, not an error)."""
        name = self.check_name(name)
        return self.declarations[name].cell_reason(f"{self.framework}.{name}", cell, self.cells, self.declarations)

    def gradient_reason(self, name: str, spec: RNNSpec) -> str | None:
        """None when rung `name` computes every gradient of this configuration, else why not (a
        rung may run a configuration whose gradients it cannot give: its `gradient_reason(spec)`)."""
        check = getattr(self.modules[self.check_name(name)], "gradient_reason", None)
        return None if check is None else check(spec)
