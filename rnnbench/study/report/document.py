"""report.md, results.csv and the plots of a run: one machine's report, or a report across machines."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from .. import plots
from ..records import read_records
from ..table import collect, ladder, ladder_markdown, markdown_table, parity_note, table_rows, write_csv
from .context import answer_section, machine_section, workloads_section
from .roof import jax_targets_section, roof_section
from .sections import (
    custom_section, first_call_section, precision_section, sanity_section, skipped_section, threads_section)


def write_report(results_path, out_dir: Path | None = None, *, command: str | None = None) -> Path:
    """Write report.md, results.csv and the plots next to `results_path` (or into `out_dir`); return
    report.md's path.  `results_path` may be several results files (`rnnbench report RUN_DIR...`):
    records of one machine give the one-machine report; of several, a report across machines with
    each machine's own report in `machines/<name>/` (`rnnbench.study.merge`)."""
    from ..merge import machine_groups

    paths = [Path(results_path)] if isinstance(results_path, (str, Path)) else [Path(p) for p in results_path]
    out = Path(out_dir) if out_dir else paths[0].parent
    out.mkdir(parents=True, exist_ok=True)
    records = [r for p in paths for r in read_records(p)]
    groups = machine_groups(records)
    if len(groups) > 1:
        lines = across_machines(groups, out, command)
    else:
        lines = machine_report(next(iter(groups.values())).records if groups else records, out, command=command)
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def across_machines(groups: dict, out: Path, command: str | None) -> list[str]:
    """The cross-machine summary, then each machine's report (headings one level down); each
    machine's report, plots and CSV also in machines/<name>/; one CSV of every row with its machine."""
    from ..merge import cross_machine_markdown

    names = {cls: f"M{i + 1}" for i, cls in enumerate(groups)}
    results = {cls: collect(g.records) for cls, g in groups.items()}
    lines = ["# rnnbench study across machines", "", f"Written {datetime.now(timezone.utc).isoformat(timespec='seconds')}"
             + (f" by `{command}`" if command else "") + ".", ""]
    lines += cross_machine_markdown(groups, results, names)
    rows = []
    for cls, g in groups.items():
        folder = f"machines/{names[cls]}-{cls}"
        sub = machine_report(g.records, out / folder, command=command, title=f"# {names[cls]}: {g.label}", files=False)
        (out / folder / "report.md").write_text("\n".join(sub))
        lines += [sub[0].replace("# ", "## ", 1), "", f"Its own report: [{folder}/report.md]({folder}/report.md).", ""]
        for line in sub[4:]:  # below the title and the "Written" line
            if line.startswith("#"):
                line = "#" + line
            lines.append(re.sub(r"\]\((?!https?:|#|/)([^)]+\.png)\)", rf"]({folder}/\1)", line))
        rows += [dict(r, machine=names[cls], machine_class=cls) for r in table_rows(results[cls])]
    write_csv(rows, out / "results.csv", first=("machine", "machine_class"))
    return lines + ["## Files", "", "- `results.csv`: every machine's table, one row per measurement and machine",
                    "- `machines/<name>/`: each machine's report, table and plots", ""]


def machine_report(records: list[dict], out: Path, *, command: str | None = None, title: str = "# rnnbench study",
                   files: bool = True) -> list[str]:
    """One machine's report.md lines; writes its results.csv and plots into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    res = collect(records)
    rows = table_rows(res)
    write_csv(rows, out / "results.csv")
    main_rows = [r for r in rows if r["group"] == "main"]
    sweep_rows = [r for r in rows if r["group"].startswith("sweep")]

    figures = {
        "ratio_to_native.png": plots.plot_ratio_to_native(res, out / "ratio_to_native.png"),
        "time_vs_seq_len.png": plots.plot_time_vs_seq_len(res, out / "time_vs_seq_len.png"),
        "time_vs_batch.png": plots.plot_time_vs_batch(res, out / "time_vs_batch.png"),
    }
    cells = list(dict.fromkeys(r["cell"] for r in main_rows))
    for cell in cells:
        figures[f"ladder_{cell}.png"] = plots.plot_ladder(res, cell, out / f"ladder_{cell}.png")

    lines = [title, "", f"Written {datetime.now(timezone.utc).isoformat(timespec='seconds')}"
             + (f" by `{command}`" if command else "") + ".", ""]
    lines += answer_section(res)
    lines += machine_section(res)
    lines += workloads_section(res)
    lines += roof_section(res)
    lines += ["## Results", "",
              "Median times; `×native` is the ratio to `torch.native` (float32 nn.LSTM / nn.GRU) of the same cell "
              "and workload, measured in pairs in the same processes, with its 95% interval in brackets (lower is "
              "faster; records without pairs: the ratio of the two medians). GFLOP/s from `RNNSpec.flops` (fwd+bwd counts 3x the forward FLOPs). "
              "`of best GEMM` is the fraction of the best GEMM rate above. `net MiB`: peak RSS less the process's RSS "
              "after importing the framework. `1st` columns: the first call, trace + compile "
              "included. Parity: max abs error of outputs and gradients against the float64 reference "
              "(it passes when every error is within the derived bound of the tolerance rule, docs/parity.md).", "", markdown_table(main_rows), ""]
    notes = {parity_note(res, r["impl"], r["cell"]) for r in main_rows} - {None}
    if notes:
        lines += [f"Parity cases: {'; '.join(sorted(notes))}.", ""]
    lines += jax_targets_section(res)
    lines += threads_section(res)
    lines += first_call_section(res)
    lines += sanity_section(main_rows + [r for r in rows if r["group"] != "main"])
    lines += custom_section(res)
    lines += precision_section(res)
    failed = [r for r in rows if r["status"] == "failed"]
    skipped = [r for r in rows if r["status"] == "skipped"]
    if failed:
        lines += ["## Failures", ""] + [f"- {r['impl']} {r['cell']} {r['workload']}: {r['reason']}" for r in failed] + [""]
    if skipped:
        lines += skipped_section(skipped)
    if res.unavailable:
        lines += ["## Unavailable here", ""] + [f"- {n}: {why}" for n, why in res.unavailable.items()] + [""]
    if figures["ratio_to_native.png"]:
        lines += ["## Ratio to native", "", "![time relative to torch.native](ratio_to_native.png)", ""]
    for cell in cells:
        workload, lrows = ladder(res, cell)
        if not lrows:
            continue
        lines += [f"## The {cell.upper()} ladder ({workload})", "",
                  "Each rung's fwd+bwd time and the speedup it buys over the rung below it (same framework): "
                  "the ratio of the two rungs' fwd+bwd ×native figures, so it agrees with that column.", "",
                  ladder_markdown(lrows), ""]
        if figures.get(f"ladder_{cell}.png"):
            lines += [f"![{cell} ladder](ladder_{cell}.png)", ""]
    lines += ["## Time against sequence length and batch size", ""]
    for name, what in (("time_vs_seq_len.png", "T"), ("time_vs_batch.png", "B")):
        if figures[name]:
            lines += [f"![time against {what}]({name})", ""]
        else:
            lines += [f"No {what} sweep in these results (run `rnnbench compare --sweeps small`).", ""]
    if sweep_rows:
        lines += ["<details><summary>Sweep measurements</summary>", "", markdown_table(sweep_rows), "",
                  "</details>", ""]
    if files:
        lines += ["## Files", "", "- `results.jsonl`: every record as measured (append-only; `--resume` continues it)",
                  "- `results.csv`: the table above, one row per measurement", ""]
    return lines
