"""Records of several machines: one group per machine, and the answers compared across them.

A time is divided only by a time of the same machine.  `machine_groups` splits records (one
results file of a cluster run, or several runs made apart: `rnnbench report RUN_DIR...`) by
the machine class they ran on (`machine.machine_class`), and each group reads exactly as one
machine's study (`table.collect`).  `cross_machine` then compares the groups' *answers* (each
machine's fastest rung, with its interval from that machine's own pairs), never their times,
and names where the answer flips: only where each machine's winner beats the other's beyond
noise on that machine (`stats.compare` of the two intervals), not where one is a tie.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .machine import machine_class, machine_label
from .records import read_records


@dataclass
class Group:
    machine_class: str
    machine: dict
    records: list[dict] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return machine_label(self.machine)


def results_files(runs: list[Path]) -> list[Path]:
    """results.jsonl of each run directory (or the file itself), each once; a clear error for a missing one."""
    out = []
    for run in runs:
        path = Path(run) / "results.jsonl" if Path(run).is_dir() else Path(run)
        if not path.is_file():
            raise FileNotFoundError(f"{run}: no results.jsonl (a report directory of `rnnbench compare`, or its "
                                    "results.jsonl)")
        if path.resolve() not in [p.resolve() for p in out]:
            out.append(path)
    return out


def machine_groups(records: list[dict]) -> dict[str, Group]:
    """machine class -> its records, in the order read.

    A local run's records belong to the machine of its meta record (by run_id).  A cluster run's
    records carry their `machine_class`; each class gets the run's meta with `machine` set to the
    class's (from the run's `machine` record) and its end with the load of its last measurement's
    node (the driver's own CPU accounting says nothing of the nodes).  Records no meta places
    (hand-made, or older than the meta) go with the last machine seen, or all into one group.
    """
    groups: dict[str, Group] = {}
    run_class: dict[str, str] = {}  # local runs: run id -> class
    cluster_metas: dict[str, dict] = {}  # cluster runs: run id -> meta
    cluster_classes: dict[str, list[str]] = {}  # cluster run id -> its classes
    last_load: dict[str, list] = {}
    loose: list[dict] = []
    current = None

    def group(cls, machine=None) -> Group:
        if cls not in groups:
            groups[cls] = Group(cls, machine or {})
        elif machine and not groups[cls].machine:
            groups[cls].machine = machine
        return groups[cls]

    for r in records:
        kind, run = r.get("kind"), r.get("run_id")
        if kind == "meta" and "cluster" in r:
            cluster_metas[run] = r
            continue
        if kind == "meta":
            current = machine_class(r.get("machine") or {})
            run_class[run] = current
            group(current, r.get("machine")).records.append(r)
            continue
        if kind == "machine" and run in cluster_metas:
            meta = cluster_metas[run]
            g = group(r["machine_class"], r.get("machine"))
            g.nodes = list(dict.fromkeys(g.nodes + list(r.get("nodes", []))))
            g.records.append(dict(meta, machine=r.get("machine"), machine_class=r["machine_class"],
                                  cluster=dict(meta["cluster"], nodes=[n for n in meta["cluster"].get("nodes", [])
                                                                       if n.get("machine_class") == r["machine_class"]])))
            cluster_classes.setdefault(run, []).append(r["machine_class"])
            current = r["machine_class"]
            continue
        if kind == "end" and run in cluster_metas:
            for cls in cluster_classes.get(run, []):
                groups[cls].records.append(dict(r, load_average=last_load.get(cls)))
            continue
        cls = r.get("machine_class") or run_class.get(run) or current
        if cls is None:
            loose.append(r)
            continue
        if r.get("node_load_average"):
            last_load[cls] = r["node_load_average"]
        group(cls).records.append(r)
    if loose:
        if len(groups) == 1:
            next(iter(groups.values())).records[:0] = loose
        else:
            groups.setdefault("unknown", Group("unknown", {})).records[:0] = loose
    return groups


def _rows_by_impl(res) -> dict[tuple, dict]:
    from .table import table_rows

    return {(r["impl"], r["cell"], r["workload"]): r for r in table_rows(res)
            if r["group"] == "main" and r["status"] == "ok" and not r["time_suspect"]}


def cross_machine(results: dict[str, object]) -> list[dict]:
    """From each machine's `table.collect` Results: per cell, workload and mode, each machine's
    answer (`table.what_to_use`: the fastest rung, its ratio to that machine's native with the
    interval, ties), and the flips: pairs of machines whose winners differ and each beats the
    other's beyond noise on its own machine; likewise the faster framework (JAX vs torch).
    Each row: cell, workload, mode, answers {class: what_to_use row or None}, flips [(class a,
    class b, a's winner, b's winner)]."""
    from rnnbench.measure.stats import compare
    from .table import MODES, native_interval, what_to_use

    answers = {cls: {(r["cell"], r["workload"], r["mode"]): r for r in what_to_use(res)[0]}
               for cls, res in results.items()}
    rows_by = {cls: _rows_by_impl(res) for cls, res in results.items()}
    phase_of = {mode: phase for mode, phase, _ in MODES}
    keys = list(dict.fromkeys(k for a in answers.values() for k in a))
    rows = []
    classes = list(results)
    for key in keys:
        cell, workload, mode = key
        phase = phase_of[mode]
        row = dict(cell=cell, workload=workload, mode=mode, answers={c: answers[c].get(key) for c in classes},
                   flips=[])
        for i, a in enumerate(classes):
            for b in classes[i + 1:]:
                ra, rb = row["answers"][a], row["answers"][b]
                if not ra or not rb:
                    continue
                x, y = ra["best"], rb["best"]
                if x != y:
                    xa, ya = rows_by[a].get((x, cell, workload)), rows_by[a].get((y, cell, workload))
                    xb, yb = rows_by[b].get((x, cell, workload)), rows_by[b].get((y, cell, workload))
                    if (xa and ya and xb and yb and compare(native_interval(xa, phase), native_interval(ya, phase)) == "<"
                            and compare(native_interval(yb, phase), native_interval(xb, phase)) == "<"):
                        row["flips"].append((a, b, x, y))
                fa, fb = ra.get("jax_vs_torch"), rb.get("jax_vs_torch")
                if {fa, fb} == {"<", ">"}:
                    row["flips"].append((a, b, "JAX" if fa == "<" else "torch", "JAX" if fb == "<" else "torch"))
        rows.append(row)
    return rows


def cross_machine_markdown(groups: dict[str, Group], results: dict[str, object], names: dict[str, str]) -> list[str]:
    """The section across machines: who they are, each one's answer, and where the answer flips."""
    from .formatting import format_ratio
    from .table import fmt, winner_text

    rows = cross_machine(results)
    lines = ["## Across machines", "",
             f"{len(groups)} machines. Each one's section below is its own study: every ratio there is a time of that "
             "machine over nn.LSTM / nn.GRU (`torch.native`) timed in the same processes of that machine; no time of "
             "one machine is ever divided by a time of another. Here, per cell, workload and mode, each machine's "
             "fastest rung with its ratio and 95% interval (a tie within noise names every rung in it), and where "
             "the answer flips: two machines whose winners differ, each winner beating the other beyond noise on "
             "its own machine (their intervals apart; a tie is no flip), or where JAX is faster beyond noise on "
             "one machine and torch on another.", ""]
    for cls, g in groups.items():
        nodes = f"; {len(g.nodes)} node(s)" if g.nodes else ""
        versions = ", ".join(f"{k} {v}" for k, v in (g.machine.get("versions") or {}).items() if k in ("torch", "jax"))
        lines.append(f"- **{names[cls]}** (`{cls}`): {g.label}" + (f"; {versions}" if versions else "") + nodes)
    lines += ["", "| cell | workload | mode | " + " | ".join(names[c] for c in groups) + " | answer flips |",
              "|---|---|---|" + "---|" * len(groups) + "---|"]
    flip_lines = []
    for row in rows:
        cells = []
        for cls in groups:
            r = row["answers"].get(cls)
            if not r:
                cells.append("n/a")
                continue
            ratio = (format_ratio(r["best_ratio"], r["best_lo"], r["best_hi"]) if r["best_lo"] != r["best_hi"]
                     else fmt(r["best_ratio"], "x"))
            cells.append(f"{winner_text(r)} {ratio}")
        flips = [f"{x} on {names[a]}, {y} on {names[b]}" for a, b, x, y in row["flips"]]
        lines.append(f"| {row['cell']} | {row['workload']} | {row['mode']} | " + " | ".join(cells)
                     + f" | {'; '.join(flips) or 'no'} |")
        flip_lines += [f"{row['cell']} {row['workload']} {row['mode']}: {f}" for f in flips]
    lines.append("")
    if flip_lines:
        lines += ["The answer flips between machines (beyond noise on each):", ""] + [f"- {f}" for f in flip_lines]
    else:
        lines += ["No answer flips between these machines beyond noise."]
    return lines + [""]


def load(runs: list[Path]) -> list[dict]:
    return [r for path in results_files(runs) for r in read_records(path)]
