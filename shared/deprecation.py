"""Earlier names that still work, in one place, each with its replacement and the release that drops it.

Using one issues a `DeprecationWarning` that names the new name; the table below is the
list docs/deprecations.md shows (tests/shared/test_docs.py keeps the two equal).  A name leaves the code in the release given, and its row leaves the table then.

Framework-neutral: no torch or jax here.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Deprecated:
    old: str  # the earlier name, as a user writes it
    new: str  # what to write instead
    where: str  # where the earlier name is accepted
    removed_in: str  # the rnnbench release without it


REMOVED_IN = "0.2.0"

DEPRECATED: dict[str, Deprecated] = {d.old: d for d in (
    Deprecated("impl=", "backend=", "jax_impl.lstm / gru / rnn, the NNX modules and their from_torch", REMOVED_IN),
    Deprecated("jax_impl.IMPLS", "jax_impl.BACKENDS", "jax_impl, jax_impl.backends", REMOVED_IN),
    Deprecated("jax_impl.available_impls", "jax_impl.available_backends", "jax_impl", REMOVED_IN),
    Deprecated("jax_impl.UnknownImplError", "jax_impl.UnknownBackendError",
               "jax_impl, jax_impl.driver, jax_impl.backends", REMOVED_IN),
    Deprecated("jax_impl.ImplUnavailableError", "jax_impl.BackendUnavailableError",
               "jax_impl, jax_impl.driver, jax_impl.backends", REMOVED_IN),
    Deprecated("jax_impl.backends.GENERIC_CELLS", "jax_impl.backends.CUSTOM_CELL_BACKENDS", "jax_impl.backends",
               REMOVED_IN),
    Deprecated("jax_impl.cells.has_jax_cell", "jax_impl.cells.has_cell", "jax_impl.cells", REMOVED_IN),
    Deprecated("model.impl", "model.backend", "the jax_impl NNX modules (also impl_options: backend_options)",
               REMOVED_IN),
    Deprecated("backend='autograd'", "backend='bptt'", "torch_impl (the modules, backends, adapter)", REMOVED_IN),
    Deprecated("torch.autograd", "torch.bptt", "shared.registry.get (records written under it still read)",
               REMOVED_IN),
    Deprecated("shared.study.workloads", "shared.measure.workloads", "imports: the new module itself", REMOVED_IN),
    Deprecated("shared.study.threads", "shared.measure.threads", "imports: the new module itself", REMOVED_IN),
    Deprecated("shared.study.worker", "shared.measure.worker",
               "`python -m shared.study.worker`; its names, each read from its module of shared.measure "
               "(timing, roof, measurement, parity_check, probe, isolated)", REMOVED_IN),
    Deprecated("shared.study.runner.NAME", "shared.study.planning.NAME, shared.study.records.NAME, shared.measure",
               "shared.study.runner: the names it no longer uses (the plan's constants, the record keys, "
               "FINAL_STATUSES, PROJECT_ROOT, the thread settings and workloads)", REMOVED_IN),
    Deprecated("shared.study.table.NAME", "shared.measure.roof.NAME",
               "shared.study.table: derive_roof, merge_roof, roof_framework, ROOF_LIBS", REMOVED_IN),
)}


_PACKAGES = tuple(str(Path(__file__).resolve().parents[1] / name) for name in ("shared", "torch_impl", "jax_impl"))


def _passed_over(filename: str) -> bool:
    return filename.startswith(_PACKAGES) or "site-packages" in filename or filename.startswith("<frozen")


def warn(old: str, *, name: str | None = None, new: str | None = None) -> None:
    """A `DeprecationWarning` for earlier name `old` (a key of `DEPRECATED`), naming its
    replacement, attributed to the first caller outside rnnbench's packages and the libraries
    they call through (Flax's module constructors, the import system): the line that used the
    earlier name.  `name` and `new` say it more precisely where one row covers several names."""
    d = DEPRECATED[old]
    frame, level = sys._getframe(1), 2
    while frame is not None and _passed_over(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"{name or d.old} is deprecated: use {new or d.new} (it is removed in rnnbench {d.removed_in})",
                  DeprecationWarning, stacklevel=level)


def moved_module(old: str, new: str) -> None:
    """Called by module `old` as it is imported: warn (row `old`), then make `old` module `new` itself
    (`sys.modules`: the import gives the new module, so its classes, and monkeypatching, are one)."""
    warn(old)
    sys.modules[old] = importlib.import_module(new)


def moved_names(module: str, row: str, moved: dict[str, str]):
    """A module-level `__getattr__` for `module`, whose names in `moved` left it: each maps to
    "new.module" or "new.module:new_name"; reading one warns (row `row` of `DEPRECATED`, naming the
    new place) and gives the object from its new module."""

    def __getattr__(name: str):
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, new_name = target.partition(":")
        warn(row, name=f"{module}.{name}", new=f"{where}.{new_name or name}")
        return getattr(importlib.import_module(where), new_name or name)

    return __getattr__


def markdown() -> str:
    """The table of docs/deprecations.md."""
    rows = ["| earlier name | use instead | accepted by | removed in |", "|---|---|---|---|"]
    rows += [f"| `{d.old}` | `{d.new}` | {d.where} | {d.removed_in} |" for d in DEPRECATED.values()]
    return "\n".join(rows)
