"""The shape both framework packages share, and the neutral core.

`torch_impl/` and `jax_impl/` have the same modules with the same roles (docs/architecture.md);
every module imports on its own; no import cycle, counting the imports inside functions and the
rungs `backends/__init__.py` imports by name (the backends build on the stacker and the cells,
never the reverse); cells are dispatched through tables or cell objects, never by comparing
names; no private helper is imported across modules; and no module of `shared/` imports torch,
jax or a framework package (it reaches them through the adapters).
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("torch_impl", "jax_impl")
# The mirrored part of the layout: the same relative module names in both packages.
MIRRORED = {"", "modules", "driver", "cells", "adapter", "train", "precision", "quantized", "backends", "backends._common",
            "backends.bptt.lstm_gru", "backends.bptt.cells"}
# And what only one framework has, each for a reason.
OWN = {"torch_impl": {"backends.bptt.gemm", "backends._compiled"},
       "jax_impl": {"functional", "xla_options", "profiling", "backends.bptt.common"}}


def _rungs(package: str) -> set[str]:
    """`backends.<rung>` for each registry row of the package's framework: a rung is its module
    and its row, and adding one edits nothing here."""
    from shared import registry

    return {f"backends.{key}" for key in registry.keys(package.removesuffix("_impl"))}


def _modules(package: str) -> list[str]:
    path = ROOT / package
    return sorted([package] + [m.name for m in pkgutil.walk_packages([str(path)], f"{package}.")])


def _relative(package: str, name: str) -> str:
    return name[len(package) + 1:] if name != package else ""


def _imports(package: str, name: str, modules: list[str]) -> set[str]:
    """The package's modules `name` imports, at module level or inside a function (an import
    inside a function runs later, but a cycle through it is a cycle all the same)."""
    path = ROOT.joinpath(*name.split("."))
    is_package = path.is_dir()
    path = path / "__init__.py" if is_package else path.with_suffix(".py")
    here = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == package}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                target = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == package:
                for a in node.names:  # `from . import cells` names a module; `from .cells import x` does not
                    found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target)
    if name == f"{package}.backends":  # the rungs, imported by name in the registry's ladder order
        found |= {m for m in modules if m.count(".") == 2 and m.startswith(f"{package}.backends.")
                  and not m.rpartition(".")[2].startswith("_")}
    return found - {name}


def _import_graph(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    graph = {}
    for name in modules:
        edges = set()
        for child in _imports(package, name, modules):
            while child not in modules and "." in child:  # `from pkg.mod import name` of a non-module
                child = child.rpartition(".")[0]
            edges.add(child)
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, as the path that closes it, or None."""
    state: dict[str, str] = {}

    def visit(node, path):
        if state.get(node) == "done":
            return None
        if state.get(node) == "active":
            return path[path.index(node):] + [node]
        state[node] = "active"
        for child in sorted(graph.get(node, ())):
            found = visit(child, path + [node])
            if found:
                return found
        state[node] = "done"
        return None

    for name in sorted(graph):
        found = visit(name, [])
        if found:
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_the_layout_is_the_mirrored_one(package):
    assert {_relative(package, m) for m in _modules(package)} == MIRRORED | OWN[package] | _rungs(package)


@pytest.mark.parametrize("package", PACKAGES + ("shared",))
def test_no_import_cycle(package):
    """Lazy imports included: a package's modules form a tree of layers (`__init__` re-exporting
    its submodules counts: a submodule must not import its package's front)."""
    graph = _import_graph(package)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"
    if package in PACKAGES:
        for name in (f"{package}.driver", f"{package}.cells"):
            assert not any(m.startswith(f"{package}.backends") for m in graph[name]), (name, graph[name])


def test_the_measurement_core_sits_below_the_study():
    """`shared.measure` (timing, workloads, threads, the roof, the worker and its isolated runner)
    serves the study, asv and the adapters: it imports nothing of the study but the per-process
    ratio estimate its records carry (`shared.study.stats`, which imports nothing of rnnbench),
    and nothing in rnnbench imports the core's earlier places in the study."""
    graph = _import_graph("shared")
    core = {name: edges for name, edges in graph.items() if name.startswith("shared.measure")}
    assert {"shared.measure.timing", "shared.measure.worker", "shared.measure.isolated"} <= set(core)
    for name, edges in core.items():
        study = {e for e in edges if e.startswith("shared.study")}
        assert study <= {"shared.study.stats"}, f"{name} imports the study: {sorted(study)}"
    assert not graph["shared.study.stats"], graph["shared.study.stats"]
    for package in PACKAGES:  # the adapters time their GEMMs with the core, never through the study
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and not node.level:
                    assert not (node.module or "").startswith("shared.study"), f"{path}:{node.lineno} imports the study"


def test_the_cycle_check_sees_imports_inside_functions():
    graph = {"p.a": {"p.b"}, "p.b": {"p.a"}}
    assert _cycle(graph) == ["p.a", "p.b", "p.a"]
    source = "def f():\n    from .driver import run\n"
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(ast.parse(source)))
    assert _cycle({"p.a": {"p.b"}, "p.b": set()}) is None


@pytest.mark.parametrize("name", [m for p in PACKAGES for m in _modules(p)])
def test_every_module_imports_on_its_own(name):
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_no_cell_name_comparisons_outside_the_catalogue(package):
    pair = re.compile(r'"lstm", "gru"')
    compare = re.compile(r'(==|!=)\s*"(lstm|gru)"|"(lstm|gru)"\s*(==|!=)|in \("lstm"')
    for path in (ROOT / package).rglob("*.py"):
        text = path.read_text()
        assert not pair.search(text), f"{path}: the literal pair of cell names belongs to shared/cells.py"
        assert not compare.search(text), f"{path}: dispatch through a table or the cell object"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_helper_imported_across_modules(package):
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(package)):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__future__"]
                assert not private, f"{path}: imports {private} from {node.module}"


def test_shared_imports_no_framework():
    """Anywhere in shared/, even inside a function: the framework is reached through
    `shared.registry.framework(name)` (an adapter module named by path), nothing else."""
    banned = ("torch", "jax", "jaxlib", "flax", "optax", "torch_impl", "jax_impl")
    for path in (ROOT / "shared").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            bad = [n for n in names if n.split(".")[0] in banned]
            assert not bad, f"{path}:{node.lineno} imports {bad}"


def test_ray_is_imported_only_inside_the_cluster_runners_functions():
    """`rnnbench compare` without --cluster never needs Ray: in shared/, only functions of
    shared/study/cluster/ import it, and nothing outside that package imports it (or one of its
    modules) at module level."""
    allowed = ROOT / "shared" / "study" / "cluster"
    for path in (ROOT / "shared").rglob("*.py"):
        tree = ast.parse(path.read_text())
        inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if not node.level else [f".{node.module or ''}"]
            else:
                continue
            ray = [n for n in names if n.split(".")[0] == "ray"]
            in_runner = allowed in path.parents
            assert not ray or (in_runner and id(node) in inside), f"{path}:{node.lineno} imports {ray}"
            # the package or one of its modules (`shared.study.cluster.driver`)
            cluster = [n for n in names if (n.endswith("cluster") or ".cluster." in n) and "study" in (n + str(path))]
            assert not cluster or id(node) in inside or in_runner, \
                f"{path}:{node.lineno} imports the cluster runner at module level"
    code = ("import sys\n"
            "import shared.cli, shared.study.cli, shared.study.runner, shared.study.report, shared.study.cluster\n"
            "assert 'ray' not in sys.modules, 'ray imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_the_catalogue_is_the_one_place_for_the_pair_of_cell_names():
    pair = re.compile(r'\("lstm", "gru"\)')
    hits = [p for d in ("shared", "torch_impl", "jax_impl", "benchmarks", "scripts") for p in (ROOT / d).rglob("*.py")
            if pair.search(p.read_text())]
    assert [p.relative_to(ROOT).as_posix() for p in hits] == ["shared/cells.py"]


def test_framework_adapters_implement_the_protocol():
    from shared.adapter import FrameworkAdapter
    from shared.registry import FRAMEWORKS, framework

    for name in FRAMEWORKS:
        if importlib.util.find_spec(name) is None:
            continue
        assert isinstance(framework(name), FrameworkAdapter), name
