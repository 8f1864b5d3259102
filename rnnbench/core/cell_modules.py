"""Your own cells in other processes: `RNNBENCH_CELL_MODULES`.

A cell registered at run time (`rnnbench.core.catalogue.register_cell`,
`rnnbench.reference.register_cell_step`, `rnnbench.torch.register_cell`,
`rnnbench.jax.register_cell`; see docs/own-cell.md) exists only in the process
that registered it.  The study measures every implementation x cell x workload in its own
subprocess (`rnnbench.measure.worker`), and asv runs its suites (`benchmarks/rnn.py`) in
processes of its own, so they cannot see it.  Put the registration in a module, at import
time, and name the module in

    RNNBENCH_CELL_MODULES=my_cells[,other.cells]      (comma-separated importable names)

Every process that resolves cells by name (the study's CLI and workers, the asv suites)
calls `import_cell_modules()` first, which imports each named module once.
`rnnbench compare/ladder --cell-modules my_cells` does the same for one command: it
imports the modules, then exports the variable (and the directories they were found in,
on PYTHONPATH) to the workers.

Importing a module is trusted code execution, as with any Python import: name only your
own modules.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

ENV = "RNNBENCH_CELL_MODULES"

_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class CellModuleError(ImportError):
    """A module named in RNNBENCH_CELL_MODULES / --cell-modules is not a valid name or cannot be imported."""


def parse(value: str | None) -> list[str]:
    """Module names from a comma-separated string (empty entries ignored); raise on a malformed name."""
    names = [v.strip() for v in (value or "").split(",") if v.strip()]
    bad = [n for n in names if not _MODULE_NAME.match(n)]
    if bad:
        raise CellModuleError(f"{ENV} / --cell-modules takes comma-separated importable module names "
                              f"(e.g. my_cells,lab.cells), got {', '.join(map(repr, bad))} in {value!r}")
    return names


def from_env() -> list[str]:
    """The module names in RNNBENCH_CELL_MODULES (none when unset)."""
    return parse(os.environ.get(ENV))


def import_cell_modules(names: list[str] | None = None) -> list[str]:
    """Import each module of `names` (default: RNNBENCH_CELL_MODULES); return the names.

    A module imported before is not imported again (Python caches it), so every entry
    point may call this.  A module that cannot be imported raises `CellModuleError`
    naming it, the variable and the cause, never a silent skip: the cells it registers
    would otherwise be "unknown cell" errors far from the reason.
    """
    names = from_env() if names is None else parse(",".join(names))
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:
            hint = (" (is it on sys.path? put its directory on PYTHONPATH; asv drops PYTHONPATH, "
                    "use ASV_PYTHONPATH there)" if isinstance(e, ModuleNotFoundError) and e.name == name.split(".")[0]
                    else "")
            raise CellModuleError(f"cell module {name!r} (from {ENV} / --cell-modules) failed to import: "
                                  f"{type(e).__name__}: {e}{hint}") from e
    return names


def import_root(name: str) -> str | None:
    """The sys.path entry an imported module `name` was found under (None for a namespace/built-in)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if path is None:
        return None
    root = Path(path).resolve().parent
    if Path(path).name == "__init__.py":  # a package: its own directory is part of the dotted name
        root = root.parent
    for _ in name.split(".")[1:]:
        root = root.parent
    return str(root)


def export(names: list[str]) -> list[str]:
    """Import the modules of RNNBENCH_CELL_MODULES and `names` here, then set the variable (both
    lists) and PYTHONPATH (the directories they were found in) in os.environ, so that
    subprocesses started from now on import them too.

    Returns every module name now in the variable.
    """
    merged = import_cell_modules(list(dict.fromkeys(from_env() + parse(",".join(names)))))
    if merged:
        os.environ[ENV] = ",".join(merged)
    roots = [r for r in (import_root(n) for n in merged) if r]
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = list(dict.fromkeys(paths + roots))
    if paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    return merged
