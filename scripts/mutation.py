"""Mutation testing of the kernels and the statistics (`make mutation`): do the tests notice a bug?

    python scripts/mutation.py                          # every module of MODULES (hours; run it alone)
    python scripts/mutation.py --modules shared/study/stats.py
    python scripts/mutation.py --list                   # the modules and the tests each is judged by

Cosmic Ray (pinned in requirements-mutation.txt, installed by `make mutation` into `.venv-mutation`,
apart from the project's venv) changes one thing at a time in a module's source (an operator, a
comparison, a constant, a removed `break` ...), runs that module's targeted tests against each such
*mutant* and records whether they failed (killed) or passed (survived). It works on the files on
disk, so this script runs it in a throw-away clone of HEAD (your working tree is never touched), with
the project's `.venv` running the tests (pytest puts the clone first on the path).

Writes `--out` (default docs/records/mutation.json) after every module: per module the mutants,
killed, survived, incompetent (the mutant did not import or the tests timed out: counted as killed
by Cosmic Ray's convention, reported apart here), excluded (the `|` of `X | None` annotations,
never evaluated: equivalent by construction; see BITOR), the score killed / (killed + survived), the
seconds, and each survivor (line, operator, diff), so that each can be killed by a new test or
explained as equivalent in docs/parity.md.  Goal: at least 90% per module.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.90

# module -> the tests that judge its mutants (the ones that exercise it directly; the whole suite
# would take minutes per mutant).
MODULES: dict[str, list[str]] = {
    "shared/study/stats.py": ["tests/shared/test_stats.py"],
    "shared/reference/steps.py": ["tests/shared/test_reference.py"],
    "shared/reference/driver.py": ["tests/shared/test_reference.py"],
    "torch_impl/cells.py": ["tests/torch_impl/test_torch_cells.py"],
    "torch_impl/backends/bptt/lstm_gru.py": ["tests/torch_impl/test_torch_bptt.py"],
    "torch_impl/backends/bptt/cells.py": ["tests/torch_impl/test_torch_bptt.py"],
    "jax_impl/cells.py": ["tests/jax_impl/test_jax_cells.py"],
    "jax_impl/backends/bptt/lstm_gru.py": ["tests/jax_impl/test_jax_bptt.py"],
    "jax_impl/backends/bptt/cells.py": ["tests/jax_impl/test_jax_bptt.py"],
}

CONFIG = """[cosmic-ray]
module-path = "{module}"
timeout = {timeout}
excluded-modules = []
test-command = "{python} -m pytest -x -q -p no:cacheprovider {tests}"

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = {exclude}
"""
# `|` in these modules is only the `X | None` of type annotations, which `from __future__ import
# annotations` leaves unevaluated: replacing it cannot change a result (an equivalent mutant).
# Excluded only where the module has no `|` outside annotations (checked by `bitor_outside_annotations`).
BITOR = "core/ReplaceBinaryOperator_BitOr_.*"


def bitor_outside_annotations(source: str) -> bool:
    """Whether `source` computes with `|` anywhere but in an annotation."""
    import ast

    tree = ast.parse(source)
    in_annotations = set()
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            annotations += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                   args.vararg, args.kwarg) if a is not None and a.annotation]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for ann in annotations:
            if ann is not None:
                in_annotations.update(id(n) for n in ast.walk(ann))
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) and id(n) not in in_annotations
               for n in ast.walk(tree))


def _run(cmd: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)


def cosmic_ray(venv: Path) -> Path:
    exe = venv / "bin" / "cosmic-ray"
    if not exe.exists():
        raise SystemExit(f"mutation: {exe} is missing; `make mutation` installs Cosmic Ray into {venv}")
    return exe


def summarize(dump: str) -> dict:
    """Counts and survivors from `cosmic-ray dump` (one JSON [work_item, result] per line)."""
    counts = dict(mutants=0, killed=0, survived=0, incompetent=0, excluded=0, pending=0)
    survivors = []
    for line in dump.splitlines():
        if not line.strip():
            continue
        item, result = json.loads(line)
        counts["mutants"] += 1
        if result is None:
            counts["pending"] += 1
            continue
        outcome = result.get("test_outcome")
        if result.get("worker_outcome") == "skipped":
            counts["excluded"] += 1  # an equivalent mutant filtered before it ran (BITOR)
        elif result.get("worker_outcome") != "normal" or outcome == "incompetent":
            counts["incompetent"] += 1  # the mutant did not import, or its tests timed out
        elif outcome == "survived":
            counts["survived"] += 1
            for m in item.get("mutations", []):
                survivors.append(dict(line=m["start_pos"][0], operator=m["operator_name"],
                                      occurrence=m["occurrence"], diff=(result.get("diff") or "")[-1500:]))
        else:
            counts["killed"] += 1
    judged = counts["killed"] + counts["survived"]
    counts["score"] = counts["killed"] / judged if judged else None
    return dict(counts, survivors=survivors)


def run_module(cr: Path, clone: Path, module: str, tests: list[str], python: str, timeout: float) -> dict:
    name = module.replace("/", "_").removesuffix(".py")
    config, session = clone / f"cr-{name}.toml", clone / f"cr-{name}.sqlite"
    exclude = [] if bitor_outside_annotations((clone / module).read_text()) else [BITOR]
    config.write_text(CONFIG.format(module=module, timeout=timeout, python=python, tests=" ".join(tests),
                                    exclude=json.dumps(exclude)))
    t0 = time.monotonic()
    for cmd in ([str(cr), "init", str(config), str(session)], [str(cr), "baseline", str(config)],
                [str(cr.parent / "cr-filter-operators"), str(session), str(config)],
                [str(cr), "exec", str(config), str(session)]):
        proc = _run(cmd, clone)
        if proc.returncode != 0:
            return dict(module=module, tests=tests, error=f"{' '.join(cmd[1:2])} failed: "
                        f"{(proc.stdout + proc.stderr)[-2000:]}", seconds=round(time.monotonic() - t0, 1))
    dump = _run([str(cr), "dump", str(session)], clone, check=True).stdout
    return dict(module=module, tests=tests, excluded_operators=exclude, seconds=round(time.monotonic() - t0, 1),
                **summarize(dump))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(MODULES), help="comma-separated modules (default: all of MODULES)")
    ap.add_argument("--list", action="store_true", help="print the modules and their tests, run nothing")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "records" / "mutation.json")
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv-mutation", help="where Cosmic Ray is installed")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one mutant's tests may take")
    args = ap.parse_args(argv)
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        raise SystemExit(f"mutation: unknown module(s) {unknown}; choose from {', '.join(MODULES)}")
    if args.list:
        for m in modules:
            print(f"{m}: {' '.join(MODULES[m])}")
        return 0
    cr = cosmic_ray(args.venv)
    python = str(ROOT / ".venv" / "bin" / "python")
    commit = _run(["git", "rev-parse", "HEAD"], ROOT, check=True).stdout.strip()
    record = dict(script="scripts/mutation.py", argv=sys.argv[1:] if argv is None else list(argv), commit=commit,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  tool=_run([str(cr), "--version"], ROOT).stdout.strip(),
                  machine=dict(cpu=platform.processor() or platform.machine(), cores=os.cpu_count()),
                  goal=GOAL, complete=False, modules=[])
    work = Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        clone = work / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        for module in modules:
            print(f"mutation: {module} against {' '.join(MODULES[module])} ...", flush=True)
            res = run_module(cr, clone, module, MODULES[module], python, args.timeout)
            record["modules"].append(res)
            if "error" in res:
                print(f"  error: {res['error']}", flush=True)
            else:
                score = "n/a" if res["score"] is None else f"{res['score']:.0%}"
                print(f"  {res['mutants']} mutants: {res['killed']} killed, {res['survived']} survived, {res['excluded']} excluded, "
                      f"{res['incompetent']} incompetent; score {score} in {res['seconds']:.0f} s", flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record["complete"] = True
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
