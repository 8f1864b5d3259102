"""What a rung runs, declared once, next to its code.

Every backend module of `torch_impl.backends` and `jax_impl.backends` has a module-level
`CAPABILITIES = Capabilities(...)`.  The registry, the adapters, the modules' checks, the
study and asv all ask it (through the adapter), so a capability is never written twice;
`tests/cross/test_capabilities.py` runs each declaration against the rung.

Framework-neutral: no torch or jax here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from . import precision
from .cells import get_cell
from .spec import RNNSpec

ANY_CELL = "any"  # every catalogue cell with a step in the framework's cell table


@dataclass(frozen=True)
class Capabilities:
    """The configurations one rung computes.

    `cells` is a tuple of cell names, or `ANY_CELL`: every cell the framework has a step
    for (a user's own included).  `why_not` gives the reason shown when a request falls
    outside the declaration, keyed by "cell", "dtype", "device", "proj_size", "lengths",
    "bidirectional" (a generic sentence is used for a missing key).
    """

    cells: tuple[str, ...] | str = ANY_CELL
    dtypes: tuple[str, ...] = precision.ALL  # precision names (`shared.precision`)
    devices: tuple[str, ...] = ("cpu", "cuda")
    proj_size: bool = False
    lengths: bool = True
    bidirectional: bool = True
    why_not: Mapping[str, str] = field(default_factory=dict)

    def runs_cell(self, cell: str, has_step) -> bool:
        """Whether this rung computes `cell`; `has_step(cell)` asks the framework's cell table."""
        if self.cells == ANY_CELL:
            return has_step(cell)
        return cell in self.cells

    def unsupported_reason(self, name: str, spec: RNNSpec, *, lengths: bool = False, dtype: str = "float32",
                           device: str | None = None, has_step=lambda cell: True) -> str | None:
        """None when `name` (e.g. "torch.eager") computes this configuration, else why not."""
        get_cell(spec.cell)  # an unknown cell raises naming the catalogue
        refusal = self.refuse_cell(name, spec.cell, has_step)
        if refusal is not None:
            return refusal
        precision.precision(dtype)  # an unknown dtype raises naming the valid ones
        if dtype not in self.dtypes:
            return self.explain("dtype", f"{name} supports dtypes {', '.join(self.dtypes)}, not {dtype}")
        if device is not None and device not in self.devices:
            return self.explain("device", f"{name} runs only on {', '.join(self.devices)}, not {device}")
        device_reason = precision.device_reason(dtype, device)
        if device_reason is not None:
            return f"{name} cannot run {dtype} on {device}: {device_reason}"
        if spec.proj_size and not self.proj_size:
            return self.explain("proj_size", f"{name} does not support proj_size")
        if lengths and not self.lengths:
            return self.explain("lengths", f"{name} does not support variable lengths")
        if spec.bidirectional and not self.bidirectional:
            return self.explain("bidirectional", f"{name} does not support bidirectional")
        return None

    def refuse_cell(self, label: str, cell: str, has_step, runs_it=()) -> str | None:
        """None when this rung computes `cell`, else why not, in the one wording both
        frameworks use: "<label> implements only lstm, gru, not 'x' (why); 'x' runs on a, b"."""
        if self.runs_cell(cell, has_step):
            return None
        if self.cells == ANY_CELL:
            return f"{label} runs every cell with a step, and {cell!r} has none"
        why = self.why_not.get("cell")
        reason = f"{label} implements only {', '.join(self.cells)}, not {cell!r}" + (f" ({why})" if why else "")
        return reason + (f"; {cell!r} runs on {', '.join(runs_it)}" if runs_it else "")

    def explain(self, key: str, generic: str) -> str:
        """`generic`, with the declared reason for `key` appended when there is one."""
        extra = self.why_not.get(key)
        return f"{generic}: {extra}" if extra else generic

    def to_dict(self) -> dict:
        return {"cells": self.cells if self.cells == ANY_CELL else list(self.cells), "dtypes": list(self.dtypes),
                "devices": list(self.devices), "proj_size": self.proj_size, "lengths": self.lengths,
                "bidirectional": self.bidirectional}
