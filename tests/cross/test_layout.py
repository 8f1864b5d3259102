"""The layout: one package, its layers, and the two framework packages mirrored by role.

`rnnbench` is the one import package of the wheel.  Its layers, bottom up (`LAYERS`): each module
imports only modules of its own layer or of those below, counting imports inside functions (a lazy
import is an edge all the same), with no exception and no cycle.  The framework is reached from the
neutral layers only by name, through `rnnbench.core.registry.framework` (its adapter module).
`rnnbench/torch/` and `rnnbench/jax/` have the same modules with the same roles
(docs/architecture.md); every module imports on its own; cells are dispatched through tables or
cell objects, never by comparing names; no private helper is imported across modules.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pkgutil
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT  # noqa: E402
# Bottom up; a layer may import its own and the ones before it.  Two packages in one entry share
# a layer and do not import each other.
LAYERS = (("core", "kernels"), ("reference",), ("vectors", "converters"), ("torch", "jax"), ("parity",), ("measure",),
          ("study",), ("cli",))
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
FRAMEWORK_PACKAGES = ("rnnbench.torch", "rnnbench.jax")
# The mirrored part of the framework packages: the same relative module names in both.
MIRRORED = {"", "modules", "stack", "cells", "adapter", "train", "precision", "quantized", "backends",
            "backends._common", "backends.bptt.lstm_gru", "backends.bptt.steps"}
# And what only one framework has, each for a reason.
OWN = {"rnnbench.torch": {"backends.bptt.gemm", "backends._compiled"},
       "rnnbench.jax": {"functional", "xla_options", "profiling", "backends.bptt.common"}}


def _rungs(package: str) -> set[str]:
    """`backends.<rung>` for each registry row of the package's framework: a rung is its module
    and its row, and adding one edits nothing here."""
    from rnnbench.core import registry

    return {f"backends.{key}" for key in registry.keys(package.rpartition(".")[2])}


def _modules(package: str = "rnnbench") -> list[str]:
    path = ROOT.joinpath(*package.split("."))
    return sorted([package] + [m.name for m in pkgutil.walk_packages([str(path)], f"{package}.")])


def _relative(package: str, name: str) -> str:
    return name[len(package) + 1:] if name != package else ""


def _source(name: str) -> tuple[Path, bool]:
    path = ROOT.joinpath(*name.split("."))
    return (path / "__init__.py", True) if path.is_dir() else (path.with_suffix(".py"), False)


def _imports(name: str, modules: list[str]) -> set[str]:
    """The rnnbench modules `name` imports, at module level or inside a function."""
    path, is_package = _source(name)
    here = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "rnnbench"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                target = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "rnnbench":
                for a in node.names:  # `from . import cells` names a module; `from .cells import x` does not
                    found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target)
    for package in FRAMEWORK_PACKAGES:  # the rungs, imported by name in the registry's ladder order
        if name == f"{package}.backends":
            found |= {m for m in modules if m.startswith(f"{package}.backends.") and m.count(".") == 3
                      and not m.rpartition(".")[2].startswith("_")}
    return found - {name}


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name in modules:
        edges = set()
        for child in _imports(name, modules):
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


def _layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for name, edges in graph.items():
        here = _layer(name)
        for edge in edges:
            there = _layer(edge)
            if here is None or there is None or there == here:
                continue
            if RANK[there] >= RANK[here]:
                bad.append(f"{name} imports {edge} ({there} is not below {here})")
    return bad


def test_every_package_of_rnnbench_has_its_layer():
    top = {p.name for p in (ROOT / "rnnbench").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    top |= {p.stem for p in (ROOT / "rnnbench").glob("*.py") if p.stem != "__init__"}
    assert top == set(RANK), f"a package without a layer, or a layer without a package: {top ^ set(RANK)}"


def test_each_module_imports_only_its_layer_and_the_ones_below_with_no_cycle():
    graph = _import_graph()
    assert _layer_violations(graph) == []
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"
    for package in FRAMEWORK_PACKAGES:  # the backends build on the stacker and the cells, never the reverse
        for name in (f"{package}.stack", f"{package}.cells"):
            assert not any(m.startswith(f"{package}.backends") for m in graph[name]), (name, graph[name])


def test_the_layer_check_can_fail():
    assert _layer_violations({"rnnbench.core.spec": {"rnnbench.study.records"}}) == [
        "rnnbench.core.spec imports rnnbench.study.records (study is not below core)"]
    assert _layer_violations({"rnnbench.torch.cells": {"rnnbench.jax.cells"}})  # one layer, two packages
    assert _layer_violations({"rnnbench.study.runner": {"rnnbench.core.spec"}}) == []
    assert _cycle({"p.a": {"p.b"}, "p.b": {"p.a"}}) == ["p.a", "p.b", "p.a"]
    assert _cycle({"p.a": {"p.b"}, "p.b": set()}) is None
    source = "def f():\n    from .stack import run\n"
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(ast.parse(source)))


def test_the_wheel_installs_one_package_and_its_console_script(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("rnnbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"rnnbench"}
    assert "rnnbench/vectors/manifest.json" in names or any(n.startswith("rnnbench/vectors/") and n.endswith(".npz")
                                                             for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "rnnbench = rnnbench.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


@pytest.mark.parametrize("package", FRAMEWORK_PACKAGES)
def test_the_framework_packages_are_mirrored(package):
    assert {_relative(package, m) for m in _modules(package)} == MIRRORED | OWN[package] | _rungs(package)


# Each module imported first, in a process of its own: a child forked from one interpreter that
# has imported the third-party libraries only (every one the package's modules import, directly or
# through each other, listed by `_THIRD_PARTY` in a process of its own; no rnnbench module), so
# the ~150 imports share torch's, JAX's and Dynamo's import time instead of paying it each.
# argv: the JSON list of modules to preload, then the modules to try.
_IMPORT_EACH = r"""
import importlib, json, os, sys, traceback
for third_party in json.loads(sys.argv[1]):
    try:
        importlib.import_module(third_party)
    except Exception:  # e.g. a module that only imports inside the package that imported it
        pass
assert not [m for m in sys.modules if m.split(".")[0] in ("rnnbench", "tools")]
result = {}
for name in sys.argv[2:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(name)
            code, message = 0, ""
        except BaseException:
            code, message = 1, traceback.format_exc()
        os.write(write, message.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        message = f.read().decode()
    _, status = os.waitpid(pid, 0)
    result[name] = message or ("" if status == 0 else f"the child ended with wait status {status}")
print(json.dumps(result))
"""
IMPORTED_ALONE = _modules() + ["tools.docs_figures"]
_THIRD_PARTY = r"""
import json, sys
for name in sys.argv[1:]:
    __import__(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] not in ("rnnbench", "tools", "__main__"))))
"""


@pytest.fixture(scope="module")
def imported_alone():
    third_party = subprocess.run([sys.executable, "-c", _THIRD_PARTY, *IMPORTED_ALONE], capture_output=True,
                                 text=True, timeout=600, cwd=ROOT)
    assert third_party.returncode == 0, third_party.stderr
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, third_party.stdout.strip().splitlines()[-1],
                           *IMPORTED_ALONE], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", IMPORTED_ALONE)
def test_every_module_imports_on_its_own(imported_alone, name):
    assert imported_alone[name] == ""


def test_a_module_that_cannot_import_on_its_own_is_reported(tmp_path):
    (tmp_path / "broken_alone.py").write_text("import rnnbench.core\nrnnbench.core.no_such_name\n")
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, "[]", "broken_alone", "rnnbench.core"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "no_such_name" in got["broken_alone"] and got["rnnbench.core"] == ""


@pytest.mark.parametrize("package", FRAMEWORK_PACKAGES)
def test_no_cell_name_comparisons_outside_the_catalogue(package):
    pair = re.compile(r'"lstm", "gru"')
    compare = re.compile(r'(==|!=)\s*"(lstm|gru)"|"(lstm|gru)"\s*(==|!=)|in \("lstm"')
    for path in ROOT.joinpath(*package.split(".")).rglob("*.py"):
        text = path.read_text()
        assert not pair.search(text), f"{path}: the literal pair of cell names belongs to rnnbench/core/catalogue.py"
        assert not compare.search(text), f"{path}: dispatch through a table or the cell object"


@pytest.mark.parametrize("package", FRAMEWORK_PACKAGES)
def test_no_private_helper_imported_across_modules(package):
    for path in ROOT.joinpath(*package.split(".")).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(package)):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__future__"]
                assert not private, f"{path}: imports {private} from {node.module}"


def _neutral_files():
    frameworks = [ROOT.joinpath(*p.split(".")) for p in FRAMEWORK_PACKAGES]
    return [p for p in (ROOT / "rnnbench").rglob("*.py") if not any(f in p.parents for f in frameworks)]


def test_the_neutral_layers_import_no_framework():
    """Anywhere outside rnnbench/torch and rnnbench/jax, even inside a function: the framework is
    reached through `rnnbench.core.registry.framework(name)` (an adapter module named by path)."""
    banned = ("torch", "jax", "jaxlib", "flax", "optax")
    for path in _neutral_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            bad = [n for n in names if n.split(".")[0] in banned or n.startswith(FRAMEWORK_PACKAGES)]
            assert not bad, f"{path}:{node.lineno} imports {bad}"


def test_ray_is_imported_only_inside_the_cluster_runners_functions():
    """`rnnbench compare` without --cluster never needs Ray: only functions of
    rnnbench/study/cluster/ import it, and nothing outside that package imports it (or one of its
    modules) at module level."""
    allowed = ROOT / "rnnbench" / "study" / "cluster"
    for path in (ROOT / "rnnbench").rglob("*.py"):
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
            # the package or one of its modules (`rnnbench.study.cluster.scheduler`)
            cluster = [n for n in names if (n.endswith("cluster") or ".cluster." in n) and "study" in (n + str(path))]
            assert not cluster or id(node) in inside or in_runner, \
                f"{path}:{node.lineno} imports the cluster runner at module level"
    code = ("import sys\n"
            "import rnnbench.cli, rnnbench.study.command, rnnbench.study.runner, rnnbench.study.report, "
            "rnnbench.study.cluster\n"
            "assert 'ray' not in sys.modules, 'ray imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_the_catalogue_is_the_one_place_for_the_pair_of_cell_names():
    pair = re.compile(r'\("lstm", "gru"\)')
    hits = [p for d in ("rnnbench", "benchmarks", "tools") for p in (ROOT / d).rglob("*.py") if pair.search(p.read_text())]
    assert [p.relative_to(ROOT).as_posix() for p in hits] == ["rnnbench/core/catalogue.py"]


def test_framework_adapters_implement_the_protocol():
    from rnnbench.core.adapter import FrameworkAdapter
    from rnnbench.core.registry import FRAMEWORKS, framework

    for name in FRAMEWORKS:
        if importlib.util.find_spec(name) is None:
            continue
        assert isinstance(framework(name), FrameworkAdapter), name


def test_no_tool_edits_sys_path():
    """Tools run as modules from the repository root (`python -m tools.NAME`), so none needs to."""
    for path in (ROOT / "tools").rglob("*.py"):
        assert "sys.path.insert" not in path.read_text() and "sys.path.append" not in path.read_text(), path
