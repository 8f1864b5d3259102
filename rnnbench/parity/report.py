"""The parity matrix's renderings: JSON, Markdown (one table per feature group) and a rich console table."""

from __future__ import annotations

import platform
from dataclasses import asdict

import numpy as np

from rnnbench.core.tolerances import LAMBDA
from .runner import CellResult, ParityReport

_ABBREVIATIONS = (("bidirectional", "bi"), ("initial_state", "h0"), ("batch_first", "bf"), ("lengths", "len"),
                  ("proj_size", "proj"), ("layers", "L"), ("all_options", "all"), ("no_bias", "nobias"),
                  ("unsorted", "unsort"), ("all_equal", "eq"), ("all_length1", "all1"), ("all_ones", "ones"))


def short_name(case_name: str) -> str:
    """A compact column label: "lstm_lengths_bidirectional" -> "lstm_len_bi"."""
    out = case_name
    for long, short in _ABBREVIATIONS:
        out = out.replace(long, short)
    return out


TOLERANCE_RULE = (f"{LAMBDA:g} * u(dtype) * sqrt(n * d) * max(1, |reference|) (rnnbench/core/tolerances.py: n the "
                  "longest per-step sum, d the steps that feed the value)")
ABBREVIATION_LEGEND = ", ".join(f"{short}={long}" for long, short in _ABBREVIATIONS[:7])

def _environment() -> dict:
    env = {"python": platform.python_version(), "machine": platform.machine(), "numpy": np.__version__}
    import importlib.util
    for mod in ("torch", "jax", "flax", "optax"):
        if importlib.util.find_spec(mod) is not None:
            try:
                env[mod] = __import__(mod).__version__
            except Exception as e:  # a broken install is worth reporting, not crashing on
                env[mod] = f"unimportable: {e}"
    return env


def to_json(report: ParityReport, training: dict | None = None) -> dict:
    out = {
        "tolerance_rule": TOLERANCE_RULE,
        "dtypes": report.dtypes,
        "implementations": report.implementations,
        "unavailable": report.unavailable,
        "subsets": report.subsets,
        "cases": report.cases,
        "cells": [asdict(c) for c in report.cells],
        "counts": report.counts(),
        "ok": report.ok,
        "seconds": report.seconds,
        "environment": _environment(),
    }
    if training is not None:
        out["training"] = training
    return out


def _short(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def _footnotes(report: ParityReport) -> dict[str, int]:
    """Distinct n/s and error reasons, numbered in order of appearance."""
    notes: dict[str, int] = {}
    for cell in report.cells:
        if cell.status in ("n/s", "error") and cell.reason not in notes:
            notes[cell.reason] = len(notes) + 1
    return notes


def _cell_text_md(cell: CellResult | None, notes: dict[str, int]) -> str:
    if cell is None:
        return "—"
    if cell.status == "pass":
        return f"✅ {_short(cell.max_error)}"
    if cell.status == "fail":
        return f"❌ {_short(cell.max_error)} ({cell.worst})"
    if cell.status == "error":
        return f"💥 error[^{notes[cell.reason]}]"
    return f"n/s[^{notes[cell.reason]}]"


def to_markdown(report: ParityReport, training: dict | None = None) -> str:
    notes = _footnotes(report)
    counts = report.counts()
    lines = ["# Parity matrix", "",
             f"Max absolute error over outputs, final states and every gradient, against the float64 "
             f"reference stored in the shared vectors; each array within its bound {TOLERANCE_RULE}.  "
             f"{counts['pass']} pass, {counts['fail']} fail, {counts['error']} error, {counts['n/s']} not "
             f"supported; {report.seconds:.0f} s.  Columns abbreviate: {ABBREVIATION_LEGEND}.", ""]
    for impl, subset in report.subsets.items():
        lines += [f"{impl} ran on {len(subset)} cases that together carry every feature tag: "
                  f"{', '.join(subset)}.", ""]
    for group, members in report.groups():
        lines += [f"## {group}", ""]
        for dtype in report.dtypes:
            header = [f"{dtype}"] + [short_name(m["name"]) for m in members]
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "---|" * len(header))
            for impl in report.implementations:
                row = [impl] + [_cell_text_md(report.cell(impl, m["name"], dtype), notes) for m in members]
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
    if report.unavailable:
        lines += ["## Not run here", ""]
        lines += [f"- `{name}`: {reason}" for name, reason in report.unavailable.items()]
        lines.append("")
    if training is not None:
        lines += training_markdown(training)
    if notes:
        lines += [f"[^{n}]: {reason}" for reason, n in notes.items()]
        lines.append("")
    return "\n".join(lines)


def render(report: ParityReport, console=None, training: dict | None = None) -> None:
    """Print the matrix with rich: one table per feature group, one line per dtype in a cell."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    notes = _footnotes(report)
    styles = {"pass": "green", "fail": "bold red", "error": "bold red", "n/s": "grey50"}
    console.print(f"[bold]Parity matrix[/bold]: max |error| over outputs, final states and every gradient against "
                  f"the float64 reference.  One line per dtype in each cell ({', '.join(report.dtypes)}); "
                  f"bound {TOLERANCE_RULE}: [green]within[/green], [bold red]over[/bold red] (the worst array named), "
                  f"[grey50]n/s\\[k][/grey50] not supported (reason \\[k] below).  Columns: {ABBREVIATION_LEGEND}.")
    tables = [(f"{group} · {cell}", [m for m in members if m["cell"] == cell])
              for group, members in report.groups() for cell in dict.fromkeys(m["cell"] for m in members)]
    for title, members in tables:
        table = Table(title=title, title_justify="left", show_lines=True)
        table.add_column("implementation", no_wrap=True)
        for m in members:
            table.add_column(short_name(m["name"]).split("_", 1)[-1], overflow="fold")
        for impl in report.implementations:
            row = [impl]
            for m in members:
                text = Text()
                for i, dtype in enumerate(report.dtypes):
                    cell = report.cell(impl, m["name"], dtype)
                    if i:
                        text.append("\n")
                    if cell is None:
                        text.append("—", style="grey50")
                    elif cell.status in ("pass", "fail"):
                        text.append("0" if cell.max_error == 0 else f"{cell.max_error:.0e}", style=styles[cell.status])
                        if cell.status == "fail":
                            text.append(f" {cell.worst}", style="red")
                    else:
                        label = "n/s" if cell.status == "n/s" else "error"
                        text.append(f"{label}[{notes[cell.reason]}]", style=styles[cell.status])  # Text: no markup
                row.append(text)
            table.add_row(*row)
        console.print(table)
    for reason, n in notes.items():
        console.print(f"[grey50][{n}] {reason}[/grey50]")
    for impl, subset in report.subsets.items():
        console.print(f"{impl}: ran on {len(subset)} cases covering every feature tag ({', '.join(subset)})")
    for name, reason in report.unavailable.items():
        console.print(f"[yellow]not run here[/yellow] {name}: {reason}")
    if training is not None:
        render_training(training, console)
    c = report.counts()
    verdict = "[bold green]all supported cells pass[/bold green]" if report.ok else "[bold red]FAILURES[/bold red]"
    console.print(f"{verdict}: {c['pass']} pass, {c['fail']} fail, {c['error']} error, {c['n/s']} n/s "
                  f"in {report.seconds:.1f} s")


# ---- identical training (torch.optim vs optax) ----------------------------------------------

def training_parity(*args, **kwargs) -> dict:
    """Identical-training report; see `rnnbench.parity.training.run` (imports torch and jax)."""
    from .training import run
    return run(*args, **kwargs)


def training_markdown(training: dict) -> list[str]:
    from .training import markdown
    return markdown(training)


def render_training(training: dict, console) -> None:
    from .training import render
    render(training, console)
