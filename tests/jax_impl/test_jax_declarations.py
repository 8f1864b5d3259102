"""The shape of `jax_impl`: every module imports on its own, no import cycle, one declaration per
backend (what the registry used to hard-code), cells dispatched through tables or objects, and the
module-level `shared.adapter.FrameworkAdapter` functions of `jax_impl.adapter`.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

import jax_impl  # noqa: E402
from jax_impl import adapter, backends  # noqa: E402
from shared.adapter import FrameworkAdapter  # noqa: E402
from shared.capabilities import ANY_CELL  # noqa: E402

PACKAGE = Path(jax_impl.__file__).parent
MODULES = sorted(["jax_impl"] + [m.name for m in pkgutil.walk_packages([str(PACKAGE)], "jax_impl.")])


def _module_imports(name: str) -> set[str]:
    """The jax_impl modules `name` imports at module level (imports inside functions are lazy)."""
    path = PACKAGE.joinpath(*name.split(".")[1:])
    is_package = path.is_dir()
    path = path / "__init__.py" if is_package else path.with_suffix(".py")
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("jax_impl")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("jax_impl"):
                continue
            for a in node.names:  # `from . import cells` names a module; `from .cells import x` does not
                found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target)
    return found - {name}


def test_the_layout_is_the_mirrored_one():
    expected = {"jax_impl", "jax_impl.functional", "jax_impl.modules", "jax_impl.driver", "jax_impl.cells",
                "jax_impl.adapter", "jax_impl.train", "jax_impl.xla_options", "jax_impl.profiling",
                "jax_impl.backends", "jax_impl.backends._common", "jax_impl.backends.naive", "jax_impl.backends.scan",
                "jax_impl.backends.flax_linen", "jax_impl.backends.flax_nnx", "jax_impl.backends.cudnn",
                "jax_impl.backends.bptt", "jax_impl.backends.bptt.lstm_gru", "jax_impl.backends.bptt.cells",
                "jax_impl.backends.bptt.common"}
    assert set(MODULES) == expected


def test_no_import_cycle_at_module_level():
    graph = {name: _module_imports(name) for name in MODULES}
    state: dict[str, str] = {}

    def visit(node, path):
        if state.get(node) == "done":
            return
        assert state.get(node) != "active", f"import cycle: {' -> '.join(path + [node])}"
        state[node] = "active"
        for child in graph.get(node, ()):
            parent = child
            while parent not in graph and "." in parent:  # `from pkg.mod import name` of a non-module
                parent = parent.rpartition(".")[0]
            visit(parent, path + [node])
        state[node] = "done"

    for name in MODULES:
        visit(name, [])
    # the rule of the layout: the backends build on the driver and the cells, never the reverse
    for name in ("jax_impl.driver", "jax_impl.cells"):
        assert not any(m.startswith("jax_impl.backends") for m in graph[name]), (name, graph[name])


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports_on_its_own(name):
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr


def test_no_cell_name_comparisons_outside_the_catalogue():
    pair = re.compile(r'"lstm", "gru"')
    compare = re.compile(r'(==|!=)\s*"(lstm|gru)"|"(lstm|gru)"\s*(==|!=)|in \("lstm"')
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert not pair.search(text), f"{path}: the literal pair of cell names belongs to shared/cells.py"
        assert not compare.search(text), f"{path}: dispatch through a table or the cell object"


def test_no_private_helper_imported_across_modules():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("jax_impl")):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__future__"]
                assert not private, f"{path}: imports {private} from {node.module}"


def test_declarations_are_what_the_registry_hard_coded():
    expected = {
        "naive": dict(cells=("lstm", "gru"), proj_size=True),
        "scan": dict(cells=ANY_CELL, proj_size=True),
        "bptt": dict(cells=("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before"), proj_size=True),
        "flax_linen": dict(cells=("lstm", "gru"), proj_size=False),
        "flax_nnx": dict(cells=("lstm", "gru"), proj_size=False),
        "cudnn": dict(cells=("lstm",), proj_size=False, dtypes=("float32",), devices=("cuda",)),
    }
    assert tuple(expected) == backends.BACKENDS
    for name, want in expected.items():
        caps = backends.capabilities(name)
        assert caps is backends.MODULES[name].CAPABILITIES
        assert adapter.get_adapter(name).capabilities is caps
        got = dict(cells=caps.cells, proj_size=caps.proj_size, dtypes=caps.dtypes, devices=caps.devices)
        assert got == {"dtypes": ("float32", "float64"), "devices": ("cpu", "cuda"), **want}, name
        assert caps.lengths and caps.bidirectional
    assert backends.GENERIC_CELLS == ("scan",)
    assert backends.PROJ_BACKENDS == ("naive", "scan", "bptt")


def test_every_cell_is_a_cell_object():
    from shared.cells import CELL_DEFS, get_cell

    for name in ("lstm", "gru", "ln_lstm", "peephole_lstm", "gru_reset_before"):
        cell = jax_impl.cells.get_jax_cell(name)
        assert cell.defn is get_cell(name) is CELL_DEFS[name] and cell.name == name
        assert cell.has_cell_state == get_cell(name).has_cell_state


def test_framework_adapter_functions():
    assert isinstance(adapter, FrameworkAdapter)
    assert adapter.available_backends("cpu") == tuple(b for b in backends.BACKENDS if b != "cudnn")
    assert adapter.trainer() is __import__("jax_impl.train").train
    assert {"jax", "jaxlib", "flax", "optax"} <= set(adapter.versions())
    adapter.reset_peak_memory("cpu")
    assert adapter.peak_memory_bytes("cpu") is None
    adapter.set_threads(3)
    assert adapter.recorded_threads == 3
    with pytest.raises(ValueError, match="threads"):
        adapter.set_threads(0)
    rates = adapter.gemm_gflops(16, 8, 12, device="cpu", min_time=0.001)
    assert set(rates) == {"xla"} and rates["xla"] > 0
