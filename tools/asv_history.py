"""The project's own history in asv: the gate's benchmarks over commits sampled from its history.

    python -m tools.asv_history --commits 21 --rounds 2       (make bench-history-sample; alone: about an hour)
    python -m tools.asv_history --from-results                 (verdicts again from the committed results)

Picks COMMITS commits evenly spaced (first parent) from FIRST, the oldest commit this suite can
still import, to HEAD; runs the regression gate's benchmark set (`PairedRatio.track_train_ratio`
of the LSTM for the gate's six rungs, on the quick workload and M50; tools/bench_compare.sh)
on each, in ROUNDS fresh processes per commit and benchmark, samples recorded, in asv's own
virtualenv (`asv run HASHFILE:...`); copies this machine's results into the committed history
(docs/records/asv/results/<machine>/, the layout asv reads) and then, for every pair of
consecutive sampled commits, asks `asv compare` with the gate's factor which moves its statistics
(Mann-Whitney U on the samples, and the factor) call real and which it calls noise.  The
verdicts go to docs/records/asv_history.json, which docs/asv.md quotes.  `make bench-publish`
publishes the committed history with this machine's own results (tools/asv_offline.py makes
the site work offline).

The machine name in asv is the CPU class (e.g. `AMD-EPYC-2cpu`), set with `asv machine
--machine`: asv compares results only within one machine, and the next machine of another
class adds a second history beside this one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "docs" / "records" / "asv" / "results"
RECORD = ROOT / "docs" / "records" / "asv_history.json"
# The oldest commit whose package the current suite (benchmarks/rnn.py) can import: the cell
# catalogue's first commit; older rungs' names are mapped in the suite (PREVIOUS_NAMES).
FIRST = "e5a7883"
GATE_SET = r"PairedRatio\.track_train_ratio\('(torch\.(eager|jit|bptt|cell_loop)|jax\.(scan|bptt))', 'lstm'"
FACTOR = 1.06  # the gate's (tools/bench_compare.sh)
ENV = {"RNNBENCH_PROFILE": "quick", "RNNBENCH_DTYPES": "float32", "RNNBENCH_THREADS": "1"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def machine_name() -> str:
    """The CPU class and usable cores, e.g. 'AMD-EPYC-2cpu' (asv's machine name)."""
    model = "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    model = re.sub(r"\(R\)|\(TM\)|Processor|CPU|@.*", "", model)
    model = re.sub(r"[^A-Za-z0-9]+", "-", model).strip("-")
    return f"{model}-{len(os.sched_getaffinity(0))}cpu"


def sample_commits(n: int, first: str = FIRST, last: str = "HEAD") -> list[str]:
    """n commits evenly spaced over first..last (first parent), both ends included, oldest first."""
    line = git("rev-list", "--first-parent", "--reverse", f"{first}~1..{last}").split()
    if n >= len(line):
        return line
    step = (len(line) - 1) / (n - 1)
    return [line[round(i * step)] for i in range(n)]


def asv(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "asv", *args]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, check=check, text=True,
                          capture_output=True)


def pinned_params() -> str:
    """Every suite's parameter lists as the working tree computes them (RNNBENCH_ASV_PARAMS: asv
    picks a combination by index at each commit; benchmarks/rnn.py's `_pinned` says why)."""
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rnn.py"), "--params"], cwd=ROOT, check=True,
                          capture_output=True, text=True, env={**os.environ, **ENV, "PYTHONPATH": str(ROOT)}).stdout.strip()


def run(commits: list[str], rounds: int, machine: str, bench: str = GATE_SET) -> None:
    asv("machine", "--machine", machine, "--yes")
    hashfile = ROOT / ".asv" / "history-commits.txt"
    hashfile.parent.mkdir(exist_ok=True)
    # newest first: asv discovers the benchmarks (and their parameters, the registry's rungs) at the
    # file's first commit, and a rung added later would be missing from an older commit's list
    hashfile.write_text("\n".join(reversed(commits)) + "\n")
    proc = asv("run", f"HASHFILE:{hashfile}", "--machine", machine, "--record-samples", "-a", f"rounds={rounds}",
               "--interleave-rounds", "--show-stderr", "-b", bench,
               env={**ENV, "RNNBENCH_ASV_PARAMS": pinned_params()}, check=False)
    print(proc.stdout[-4000:], proc.stderr[-4000:])


def collect(machine: str) -> None:
    """This machine's results into the committed history (asv's layout: <machine>/<sha8>-<env>.json)."""
    src = ROOT / ".asv" / "results"
    dst = HISTORY / machine
    dst.mkdir(parents=True, exist_ok=True)
    for path in (src / machine).glob("*.json"):
        shutil.copy2(path, dst / path.name)
    shutil.copy2(src / "benchmarks.json", HISTORY / "benchmarks.json")


def measured(machine: str, commits: list[str]) -> dict[str, list[str]]:
    """The sampled commits at which some gate benchmark has a ratio, and those at which none has
    (every benchmark failed: the commit's own code raised, which asv records as failed)."""
    out: dict[str, list[str]] = {"measured": [], "failed": []}
    for commit in commits:
        path = HISTORY / machine / f"{commit[:8]}-virtualenv-py3.11.json"
        ok = False
        if path.exists():
            data = json.loads(path.read_text())
            entry = dict(zip(data["result_columns"], data["results"].get("rnn.PairedRatio.track_train_ratio", [])))
            ok = any(isinstance(v, float) and 0 < v < 100 for v in entry.get("result") or [])
        out["measured" if ok else "failed"].append(commit[:8])
    return out


def history_config() -> Path:
    """asv.conf.json with the committed history as its results (asv compare reads them from there)."""
    from asv import util

    conf = util.load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    for key in ("repo", "benchmark_dir", "env_dir", "html_dir"):  # relative to the config's folder
        conf[key] = str(ROOT / conf[key])
    conf["results_dir"] = str(HISTORY)
    path = ROOT / ".asv" / "history.conf.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(conf, indent=1))
    return path


MARKS = {"+": "slower", "-": "faster", "!": "failed at the later commit", "*": "failed at the earlier commit",
         "x": "not comparable"}


def compare_row(line: str) -> dict | None:
    """One row of `asv compare`'s Markdown table, or None (headers, or not measured at both commits).
    A ratio marked ~ moved by more than the factor while the statistics call it noise."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 5 or not cells[4].startswith("rnn."):
        return None
    mark, before, after, ratio, name = cells
    if mark in MARKS:
        verdict = MARKS[mark]
    elif "n/a" in (before, after) or "failed" in (before, after):
        return None
    else:
        verdict = "beyond the factor, not significant" if ratio.startswith("~") else "unchanged"
    return dict(benchmark=name, before=before, after=after, ratio=ratio.lstrip("~"), verdict=verdict)


def verdicts(commits: list[str], machine: str) -> list[dict]:
    """asv compare, gate factor, on each pair of consecutive sampled commits: every row it marks."""
    config = history_config()
    out = []
    for base, head in zip(commits, commits[1:]):
        proc = asv("compare", "--config", str(config), "--factor", str(FACTOR), "--split", "--machine", machine,
                   base, head, check=False)
        rows = [row for row in map(compare_row, proc.stdout.splitlines()) if row]
        out.append(dict(base=base[:8], head=head[:8], rows=rows))
    return out


def summarize(pairs: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for p in pairs:
        for r in p["rows"]:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    real = [dict(base=p["base"], head=p["head"], **r) for p in pairs for r in p["rows"]
            if r["verdict"] in ("slower", "faster")]
    return dict(compared=sum(counts.values()), counts=counts, significant=real, slower=counts.get("slower", 0),
                faster=counts.get("faster", 0), noise=counts.get("beyond the factor, not significant", 0))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commits", type=int, default=21)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--machine", default=None, help="asv machine name (default: the CPU class)")
    p.add_argument("--last", default="HEAD")
    p.add_argument("--bench", default=GATE_SET, help="asv's -b regex (default: the gate's set)")
    p.add_argument("--from-results", action="store_true", help="only the verdicts, from the committed results")
    args = p.parse_args(argv)
    machine = args.machine or machine_name()
    if args.from_results:
        previous = json.loads(RECORD.read_text())
        commits, machine = previous["commits"], previous["machine"]
    else:
        commits = sample_commits(args.commits, last=args.last)
        started = datetime.now(timezone.utc)
        run(commits, args.rounds, machine, args.bench)
        collect(machine)
    pairs = verdicts(commits, machine)
    done = measured(machine, commits)
    record = dict(machine=machine, commits=commits, sampled=len(commits), rounds=args.rounds, factor=FACTOR,
                  benchmarks=args.bench,
                  environment=ENV, pairs=pairs, **done, measured_commits=len(done["measured"]),
                  **summarize(pairs))
    if not args.from_results:
        record.update(started=started.isoformat(timespec="seconds"),
                      minutes=(datetime.now(timezone.utc) - started).total_seconds() / 60)
    else:
        record.update({k: previous[k] for k in ("started", "minutes", "rounds") if k in previous})
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("machine", "compared", "counts")}, indent=1))
    print(f"wrote {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
