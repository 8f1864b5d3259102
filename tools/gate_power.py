"""The regression gate's measured power and false-alarm rate (`make gate-power`).

    python -m tools.gate_power [--trials 10] [--slowdown 0.10] [--impl torch.eager]
                                 [--out docs/records/gate_power.json] [--workdir DIR]

In a throw-away clone of this repository's HEAD (your working tree and .asv are not
touched) it makes two commits on top of HEAD:

- *planted*: the `--impl` rung's train step busy-waits, after each step, for `--slowdown`
  of that step's own measured time (`plant_slowdown`): a real extra cost, proportional to
  the step, in that rung only (nn.LSTM, the baseline of the ratio, is untouched);
- *unchanged*: a commit that changes nothing measured (a line added to docs/asv.md).

and then alternates `--trials` trials of each kind, each one `tools/bench_compare.sh`
(`make bench-compare`) with its defaults (FACTOR, ROUNDS; BENCH, RNNBENCH_* as set in the
environment), from scratch (the clone's asv results are removed before every trial):

- same-commit trial: HEAD..unchanged on the default gate set; any failure is a false alarm;
- power trial: HEAD..planted on the planted rung's benchmarks of the gate set (the other
  benchmarks run in processes of their own, so they cannot change whether the planted
  rung's are caught; their false alarms are what the same-commit trials count); detected
  when the gate fails with one of the planted rung's benchmarks marked slower.

Prints each trial and writes `--out` (JSON): power, false-alarm rate, trial counts, seconds
per trial, the machine (CPU model from /proc/cpuinfo, cores), the load average around each
trial, and the commit.  Run it alone on the machine: on two cores the default takes about
an hour (10 same-commit trials of the whole gate set, 10 power trials of one rung).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# asv's --split table: "| + | 2.26 | 2.84 | 1.26 | rnn.PairedRatio.track_train_ratio('torch.eager', ...) |"
ROW = re.compile(r"^\|\s*([+!\-x* ])\s*\|\s*(\S*)\s*\|\s*(\S*)\s*\|\s*(\S*)\s*\|\s*(rnn\.\S+\(.*\))\s*\|$", re.M)
GATE_BENCH = "PairedRatio\\.track_train_ratio\\('{impl}', 'lstm'"

PLANT = '''

# ---- planted slowdown (a throw-away commit of tools/gate_power.py; never on a real branch) ----
def _plant_slowdown(factory, key, fraction):
    import time as _time

    def get_planted(k, *args, **kwargs):
        adapter = factory(k, *args, **kwargs)
        if k == key:
            make = adapter.make_workload

            def make_workload(*a, **kw):
                wl = make(*a, **kw)
                step = wl.train_step

                def train_step():
                    t0 = _time.perf_counter()
                    step()
                    end = t0 + (_time.perf_counter() - t0) * (1 + fraction)
                    while _time.perf_counter() < end:  # busy: a real cost, proportional to the step
                        pass

                wl.train_step = train_step
                return wl

            adapter.make_workload = make_workload
        return adapter

    return get_planted


get_adapter = _plant_slowdown(get_adapter, {key!r}, {fraction!r})
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def plant_slowdown(repo: Path, impl: str, fraction: float, message: str | None = None) -> str:
    """Commit, in `repo`, a slowdown of `fraction` of the train step of rung `impl`
    ("torch.eager", "jax.scan", ...): its adapter's workloads busy-wait after each train
    step for `fraction` of the step's own time.  Returns the new commit's sha."""
    framework, key = impl.split(".", 1)
    adapter = repo / "rnnbench" / framework / "adapter.py"
    text = adapter.read_text()
    if "\ndef get_adapter(" not in text:
        raise RuntimeError(f"{adapter} has no get_adapter to wrap")
    adapter.write_text(text + PLANT.format(key=key, fraction=fraction))
    _git(repo, "commit", "-qam", message or f"planted slowdown: {impl} train step +{fraction:.0%}")
    return _git(repo, "rev-parse", "HEAD").strip()


def slower_rows(output: str) -> list[dict]:
    """The rows of asv's comparison marked slower (+) or newly failing (!)."""
    return [dict(mark=m[0], before=m[1], after=m[2], ratio=m[3], benchmark=m[4])
            for m in ROW.findall(output) if m[0] in "+!"]


def all_rows(output: str) -> list[dict]:
    return [dict(mark=m[0].strip(), before=m[1], after=m[2], ratio=m[3], benchmark=m[4]) for m in ROW.findall(output)]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def run_gate(clone: Path, base: str, head: str, home: Path, bench: str | None, timeout: float, **env_extra) -> dict:
    shutil.rmtree(clone / ".asv" / "results", ignore_errors=True)  # every trial from scratch
    env = dict(os.environ, HOME=str(home), ASV=f"{sys.executable} -m asv", PYTHON=sys.executable, **env_extra)
    if bench:
        env["BENCH"] = bench
    load0, t0 = loadavg(), time.monotonic()
    proc = subprocess.run(["bash", "tools/bench_compare.sh", base, head], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    return dict(rc=proc.returncode, seconds=round(time.monotonic() - t0, 1), load_before=load0,
                load_after=loadavg(), slower=[r["benchmark"] for r in slower_rows(out)], rows=all_rows(out),
                output_tail=out[-3000:] if proc.returncode not in (0, 1) else "")


def make_record(trials: list[dict], args, argv, commit: str, started: float, complete: bool) -> dict:
    """The JSON record of the trials so far (written after every trial: an interrupted run keeps them)."""
    power = [t for t in trials if t["kind"] == "power"]
    same = [t for t in trials if t["kind"] == "same_commit"]

    def rate(ts: list[dict], field: str) -> dict:
        hits = sum(t[field] for t in ts)
        secs = [t["seconds"] for t in ts]
        return {"trials": len(ts), "hits": hits, "rate": hits / len(ts) if ts else None,
                "seconds_per_trial": round(sum(secs) / len(secs), 1) if secs else None,
                "max_seconds": max(secs, default=None)}

    pw, fa = rate(power, "detected"), rate(same, "false_alarm")
    pw["detected"], fa["alarms"] = pw.pop("hits"), fa.pop("hits")
    return {
        "script": "tools/gate_power.py", "argv": sys.argv[1:] if argv is None else list(argv),
        "complete": complete,
        "commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                    "cores_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                    "platform": platform.platform()},
        "gate": {"factor": os.environ.get("FACTOR", "default"), "rounds": os.environ.get("ROUNDS", "default"),
                 "bench": os.environ.get("BENCH", "default"), "planted_impl": args.impl,
                 "planted_slowdown": args.slowdown},
        "power": pw,
        "false_alarm": fa,
        "seconds": round(time.time() - started, 1),
        "trials": trials,
    }


def write(record: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10, help="trials of each kind (default 10)")
    ap.add_argument("--slowdown", type=float, default=0.10, help="planted slowdown, a fraction (default 0.10)")
    ap.add_argument("--impl", default="torch.eager", help="the rung slowed down (default torch.eager)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "records" / "gate_power.json")
    ap.add_argument("--workdir", type=Path, help="where to clone (default a temporary directory, removed after)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one gate run may take (default 1800)")
    args = ap.parse_args(argv)

    commit = _git(ROOT, "rev-parse", "HEAD").strip()
    work = Path(tempfile.mkdtemp(prefix="gate-power-", dir=args.workdir))
    clone, home = work / "repo", work / "home"
    home.mkdir()
    started = time.time()
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        _git(clone, "config", "user.email", "gate-power@localhost")
        _git(clone, "config", "user.name", "gate power")
        base = _git(clone, "rev-parse", "HEAD").strip()
        _git(clone, "checkout", "-qb", "planted")
        planted = plant_slowdown(clone, args.impl, args.slowdown)
        _git(clone, "checkout", "-qb", "unchanged", base)
        (clone / "docs" / "asv.md").write_text((clone / "docs" / "asv.md").read_text() + "\n")
        _git(clone, "commit", "-qam", "a change nothing measures")
        unchanged = _git(clone, "rev-parse", "HEAD").strip()

        # The first gate run builds asv's virtualenv: a warm-up run, not a trial.
        print("gate-power: building asv's environment (one short gate run, not counted)", file=sys.stderr)
        warm = run_gate(clone, base, unchanged, home, GATE_BENCH.format(impl=re.escape(args.impl)) + ", 'quick'",
                        args.timeout, ROUNDS="1")
        if warm["rc"] not in (0, 1):
            print(warm["output_tail"], file=sys.stderr)
            raise SystemExit(f"gate-power: the warm-up gate run failed (exit {warm['rc']})")

        trials = []
        for n in range(1, args.trials + 1):
            for kind, head, bench in (("same_commit", unchanged, None),
                                      ("power", planted, GATE_BENCH.format(impl=re.escape(args.impl)))):
                rec = run_gate(clone, base, head, home, bench, args.timeout)
                rec.update(kind=kind, trial=n)
                if kind == "power":
                    rec["detected"] = rec["rc"] == 1 and any(f"('{args.impl}'" in b for b in rec["slower"])
                else:
                    rec["false_alarm"] = rec["rc"] != 0
                trials.append(rec)
                verdict = ("detected" if rec["detected"] else "missed") if kind == "power" else (
                    "FALSE ALARM" if rec["false_alarm"] else "passed")
                print(f"trial {n:2d} {kind:11s} exit {rec['rc']} {verdict:11s} {rec['seconds']:7.1f} s "
                      f"load {rec['load_before']}->{rec['load_after']} slower: {', '.join(rec['slower']) or '-'}",
                      flush=True)
                if rec["rc"] not in (0, 1):
                    print(rec["output_tail"], file=sys.stderr)
                write(make_record(trials, args, argv, commit, started, complete=False), args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    record = make_record(trials, args, argv, commit, started, complete=True)
    write(record, args.out)
    power, fa = record["power"], record["false_alarm"]
    print(f"power: {power['detected']}/{power['trials']} planted {args.slowdown:.0%} slowdowns of {args.impl} "
          f"detected; false alarms: {fa['alarms']}/{fa['trials']} same-commit runs of the gate set; "
          f"{fa['seconds_per_trial']} s per gate run; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
