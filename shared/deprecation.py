"""Earlier names that still work, in one place, each with its replacement and the release that drops it.

Using one issues a `DeprecationWarning` that names the new name; the table below is the
list docs/deprecations.md shows (tests/shared/test_docs.py keeps the two equal).  A name leaves the code in the release given, and its row leaves the table then.

Framework-neutral: no torch or jax here.
"""

from __future__ import annotations

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
)}


_PACKAGES = tuple(str(Path(__file__).resolve().parents[1] / name) for name in ("shared", "torch_impl", "jax_impl"))


def _passed_over(filename: str) -> bool:
    return filename.startswith(_PACKAGES) or "site-packages" in filename or filename.startswith("<frozen")


def warn(old: str) -> None:
    """A `DeprecationWarning` for earlier name `old` (a key of `DEPRECATED`), naming its
    replacement, attributed to the first caller outside rnnbench's packages and the libraries
    they call through (Flax's module constructors): the line that used the earlier name."""
    d = DEPRECATED[old]
    frame, level = sys._getframe(1), 2
    while frame is not None and _passed_over(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"{d.old} is deprecated: use {d.new} (it is removed in rnnbench {d.removed_in})",
                  DeprecationWarning, stacklevel=level)


def markdown() -> str:
    """The table of docs/deprecations.md."""
    rows = ["| earlier name | use instead | accepted by | removed in |", "|---|---|---|---|"]
    rows += [f"| `{d.old}` | `{d.new}` | {d.where} | {d.removed_in} |" for d in DEPRECATED.values()]
    return "\n".join(rows)
