"""How long the full parity matrix takes here, one implementation at a time (`make parity-matrix-time`).

    python -m tools.parity_matrix_time                                # every implementation (hours; alone)
    python -m tools.parity_matrix_time --impls torch.eager,jax.scan   # some; --merge keeps the others' rows

For each implementation, `RNNBENCH_FULL_MATRIX=<impl> pytest tests/cross/test_parity_matrix.py`
runs every vector in every dtype of that implementation (`make parity-matrix IMPLS=<impl>`, the
job a schedule would split the matrix into) and this script keeps its wall time and pytest's
counts (passed, failed, skipped) and the ids of the cells that failed in `--out` (default docs/records/parity_matrix.json), written after
every implementation, so an interrupted run keeps what it measured.  The record's `total_seconds`
is the sum over the implementations measured; `complete` says whether every registered one was.
Only the implementation's own cases are selected (the other rungs' CI subsets are not rerun).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from rnnbench.core import registry
from rnnbench.study.machine import machine_info

TEST = "tests/cross/test_parity_matrix.py"


def counts(summary: str) -> dict[str, int]:
    """pytest's last line ("3 passed, 2 skipped in 4.1s") as {"passed": 3, "skipped": 2, ...}."""
    found = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}
    return {"passed": 0, "failed": 0, "skipped": 0, **found}


def failures(stdout: str) -> list[str]:
    """The node ids pytest's short summary lists as failed or erroring ("FAILED id - reason")."""
    return [m.group(2) for m in re.finditer(r"^(FAILED|ERROR) (.+?)(?: - .*)?$", stdout, re.MULTILINE)]


def node_ids(impl: str, env: dict) -> list[str]:
    """The matrix cells of `impl` alone (its id prefix), collected with the full matrix switched on for it."""
    out = subprocess.run([sys.executable, "-m", "pytest", TEST, "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"parity_matrix_time: collecting {impl}'s matrix failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return [line for line in out.stdout.splitlines() if f"[{impl}-" in line and "::test_" in line]


def time_impl(impl: str, pytest_args: list[str]) -> dict:
    env = dict(os.environ, RNNBENCH_FULL_MATRIX=impl)
    ids = node_ids(impl, env)
    if not ids:  # unavailable here (jax.cudnn on a CPU): pytest given no ids would run the whole file
        return dict(impl=impl, tests=0, seconds=0.0, rc=0, summary="no cells here (unavailable on this machine)")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", *ids, "-q", "-rfE", "-p", "no:cacheprovider", *pytest_args],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    last = (out.stdout.strip().splitlines() or [""])[-1]
    return dict(impl=impl, tests=len(ids), seconds=round(seconds, 1), rc=out.returncode, summary=last.strip("= "),
                **counts(last), failures=failures(out.stdout))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impls", default=",".join(registry.names()), help="comma-separated (default: every one)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "records" / "parity_matrix.json")
    ap.add_argument("--merge", action="store_true", help="keep the rows of implementations not measured now")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --), e.g. -- -n 2")
    args = ap.parse_args(argv)
    impls = [registry.get(name.strip()).name for name in args.impls.split(",") if name.strip()]
    previous = json.loads(args.out.read_text()) if args.merge and args.out.exists() else {}
    rows = {r["impl"]: r for r in previous.get("rows", [])}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    info = machine_info("cpu", 2)
    for impl in impls:
        print(f"parity matrix of {impl} ...", flush=True)
        row = dict(time_impl(impl, args.pytest_args), commit=commit,
                   date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        rows[impl] = row
        print(f"  {row['summary']} ({row['seconds']:.0f} s wall)", flush=True)
        ordered = [rows[n] for n in registry.names() if n in rows]
        record = dict(command="make parity-matrix-time" + (f' MATRIX_TIME_ARGS="-- {" ".join(args.pytest_args)}"'
                                                           if args.pytest_args else ""),
                      cpu=info.get("cpu"), cores=info.get("logical_cpus"), pytest_args=args.pytest_args,
                      rows=ordered, total_seconds=round(sum(r["seconds"] for r in ordered), 1),
                      complete=set(rows) >= set(registry.names()),
                      failed=sum(r.get("failed", 0) + r.get("error", 0) + r.get("errors", 0) for r in ordered))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if all(rows[i]["rc"] == 0 for i in impls) else 1


if __name__ == "__main__":
    sys.exit(main())
