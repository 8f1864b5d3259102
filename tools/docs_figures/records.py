"""The records a figure reads: the committed study (`Study`, the `study:` keys) and JSON files (`json:`)."""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from pathlib import Path

from rnnbench.study.formatting import format_ratio, ratio_interval

ROOT = Path(__file__).resolve().parents[2]
STUDY_RECORDS = "docs/records/full-2026-12-03/results.jsonl"
PHASES = {"forward": "fwd", "train": "fwd+bwd"}
ROOFS = ("machine", "torch", "xla", "own")


class FigureError(ValueError):
    """A key that cannot be rendered: malformed, or no record holds it."""


# ---- the study records -----------------------------------------------------------------
class Study:
    """One results file read once through the study's table code."""

    def __init__(self, path: Path):
        from rnnbench.study.records import read_records
        from rnnbench.study.table import collect

        self.path = Path(path)
        self.res = collect(read_records(self.path))
        if not self.res.measurements:
            raise FigureError(f"{self.path}: no measurement records")

    @cached_property
    def rows(self) -> list[dict]:
        from rnnbench.study.table import table_rows

        return table_rows(self.res)

    @cached_property
    def precision_rows(self) -> list[dict]:
        from rnnbench.study.table import precision_rows

        return precision_rows(self.res)

    def row(self, impl: str, cell: str, workload: str, dtype: str = "float32", *, rows=None) -> dict:
        found = [r for r in (rows or self.rows)
                 if (r["impl"], r["cell"], r["workload"], r["dtype"]) == (impl, cell, workload, dtype)]
        if not found:
            raise FigureError(f"no measurement of {impl} {cell} {workload} {dtype} in {self.path.name}")
        if len(found) > 1:
            raise FigureError(f"{impl} {cell} {workload} {dtype} was measured on several devices")
        return found[0]

    def record(self, row: dict) -> dict | None:
        return self.res.find(row["impl"], row["cell"], row["workload"], row["device"], row["dtype"])

    def value(self, row: dict, key: str, what: str):
        if row.get(key) is None:
            why = f" ({row['status']}: {row.get('reason')})" if row.get("status") != "ok" else ""
            raise FigureError(f"{row['impl']} {row['cell']} {row['workload']} {row['dtype']} has no {what}{why}")
        return row[key]

    # -- inline keys --
    def ratio(self, impl, cell, workload, phase, dtype="float32") -> str:
        _phase(phase)
        if dtype == "float32":
            row = self.row(impl, cell, workload)
            value = self.value(row, f"{phase}_x_native", f"{phase} ratio")
        else:  # over float32 nn.LSTM / nn.GRU, as the report's Precision section
            row = self.row(impl, cell, workload, dtype, rows=self.precision_rows)
            value = self.value(row, f"{phase}_x_native32", f"{phase} ratio to float32 native")
        return format_ratio(value, *ratio_interval(phase, row, self.record(row)))

    def ms(self, impl, cell, workload, phase, dtype="float32") -> str:
        _phase(phase)
        return f"{_fmt(self.value(self.row(impl, cell, workload, dtype), f'{phase}_ms', f'{phase} time'), 'ms')} ms"

    def gflops(self, impl, cell, workload, phase) -> str:
        _phase(phase)
        return f"{_fmt(self.value(self.row(impl, cell, workload), f'gflops_{phase}', 'GFLOP/s'), 'g')} GFLOP/s"

    def fraction(self, impl, cell, workload, phase, roof="machine") -> str:
        from rnnbench.measure.roof import roof_framework

        _phase(phase)
        row = self.row(impl, cell, workload)
        scope = roof_framework(row["framework"]) if roof == "own" else roof
        rate = self._roof_rate(cell, workload, scope)
        return _fmt(self.value(row, f"gflops_{phase}", "GFLOP/s") / rate, "%")

    def roof(self, cell, workload, roof="machine", shape=None) -> str:
        return f"{_fmt(self._roof_rate(cell, workload, roof, shape), 'g')} GFLOP/s"

    def _roof_rate(self, cell, workload, roof, shape=None) -> float:
        from rnnbench.measure.roof import ROOF_LIBS

        libs = ROOF_LIBS.get(roof) or ((roof,) if roof in ROOF_LIBS["machine"] else None)
        if libs is None:
            names = dict.fromkeys(ROOFS[:-1] + ROOF_LIBS["machine"])
            raise FigureError(f"roof {roof!r}: one of {', '.join(names)}")
        found = [v for (c, w, _), v in self.res.roofs.items() if (c, w) == (cell, workload)]
        if len(found) != 1:
            raise FigureError(f"no GEMM roof of {cell} {workload} in {self.path.name}" if not found
                              else f"the GEMM roof of {cell} {workload} was measured on several devices")
        row = found[0]
        if shape is None and roof in ROOF_LIBS:
            rate = row.get(f"roof_{roof}_gflops")
        elif shape in ("step", "input", None):
            shapes = ("step", "input") if shape is None else (shape,)
            rate = max((row.get(f"{sh}_{lib}_gflops") or 0 for sh in shapes for lib in libs), default=0) or None
        else:
            raise FigureError(f"roof shape {shape!r}: step or input")
        if not rate:
            raise FigureError(f"no {roof} roof rate of {cell} {workload}")
        return rate

    def drift(self, cell=None, workload=None) -> str:
        """The largest change of a GEMM rate between the start and the end of the run (of one roof row)."""
        if (cell is None) != (workload is None):
            raise FigureError("study:drift[/CELL/WORKLOAD]")
        found = [v for (c, w, _), v in self.res.roofs.items() if cell is None or (c, w) == (cell, workload)]
        drifts = [v["roof_drift"] for v in found if v.get("roof_passes", 1) > 1 and v.get("roof_drift") is not None]
        if not drifts:
            raise FigureError(f"no GEMM roof measured twice{f' for {cell} {workload}' if cell else ''}")
        return _fmt(max(drifts), "%")

    def first(self, impl, cell, workload, phase, cache="cold") -> str:
        _phase(phase)
        if cache not in ("cold", "warm"):
            raise FigureError(f"study:first/.../{cache}: cold (the default) or warm")
        field = f"first_{phase}_s" if cache == "cold" else f"first_{phase}_warm_s"
        return f"{_fmt(self.value(self.row(impl, cell, workload), field, f'{cache} first call'), 's')} s"

    def fastest(self, cell, workload, phase, framework=None) -> str:
        from rnnbench.study.table import what_to_use

        mode = {"train": "training", "forward": "inference"}[_phase(phase)]
        found = [r for r in what_to_use(self.res)[0] if (r["cell"], r["workload"], r["mode"]) == (cell, workload, mode)]
        if not found:
            raise FigureError(f"no trusted {cell} {workload} {phase} time in {self.path.name}")
        impl = found[0]["best"] if framework is None else found[0].get(f"best_{framework}")
        if not impl:
            raise FigureError(f"no {framework} rung of {cell} {workload} {phase}")
        return f"`{impl}`"

    def run(self, field) -> str:
        meta = self.res.metas[-1] if self.res.metas else {}
        machine = meta.get("machine", {})
        if field == "measurements":
            return str(len(self.res.measurements))
        if field == "minutes":
            end = next((e for e in reversed(self.res.ends) if e.get("run_id") == meta.get("run_id")), None)
            if not end or len(self.res.metas) != 1:
                raise FigureError("the run's length needs one uninterrupted session with its end record")
            span = datetime.fromisoformat(end["finished"]) - datetime.fromisoformat(meta["started"])
            return f"{span.total_seconds() / 60:.0f} min"
        values = {"commit": machine.get("git_commit"), "date": (meta.get("started") or "")[:10] or None,
                  "threads": meta.get("threads"), "cpu": machine.get("cpu"),
                  **{k: v for k, v in machine.get("versions", {}).items()}}
        if values.get(field) is None:
            raise FigureError(f"run field {field!r}: one of measurements, minutes, "
                              + ", ".join(k for k, v in values.items() if v is not None))
        return str(values[field])

    # -- blocks --
    def table(self, spec: str) -> str:
        framework, _, cols_text = spec.partition("/")
        if framework not in ("all", "torch", "jax") or not cols_text:
            raise FigureError("study:table/FRAMEWORK/COL,COL,... with FRAMEWORK all, torch or jax")
        cols = []
        for col in cols_text.split(","):
            parts = col.split("/")
            if len(parts) not in (3, 4):
                raise FigureError(f"table column {col!r}: CELL/WORKLOAD/PHASE[/DTYPE]")
            cell, workload, phase, dtype = (parts + ["float32"])[:4]
            cols.append((cell, workload, _phase(phase), dtype))
        keys = {(c, w, d) for c, w, _, d in cols}
        impls = {(r["impl"], r["framework"], r["rung"]) for r in self.rows
                 if (r["cell"], r["workload"], r["dtype"]) in keys and framework in ("all", r["framework"])}
        if not impls:
            raise FigureError(f"no measurement for the columns of study:table/{spec}")
        order = sorted(impls, key=lambda i: (i[1] != "torch", i[1] or "", i[2] if i[2] is not None else 99, i[0]))
        from rnnbench.core.catalogue import STANDARD_CELLS

        head = ["implementation"] + [f"{c.upper() if c in STANDARD_CELLS else c} {w} {PHASES[p]}"
                                     + ("" if d == "float32" else f" {d}") for c, w, p, d in cols]
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(cols)]
        for impl, _, _ in order:
            lines.append("| " + " | ".join([impl] + [self._table_cell(impl, *col) for col in cols]) + " |")
        return "\n".join(lines)

    def _table_cell(self, impl, cell, workload, phase, dtype) -> str:
        from rnnbench.study.table import NATIVE

        try:
            row = self.row(impl, cell, workload, dtype)
        except FigureError:
            return "n/s"
        if row["status"] == "skipped":
            return "n/s"
        if row.get(f"{phase}_ms") is None:
            return "failed" if row["status"] == "failed" else "n/a"
        text = self.ratio(impl, cell, workload, phase, dtype)
        if impl == NATIVE and dtype == "float32":
            text += f" ({_fmt(row[f'{phase}_ms'], 'ms')} ms)"
        return text + (" ⚠" if row.get("flags") else "")


def _phase(phase: str) -> str:
    if phase not in PHASES:
        raise FigureError(f"phase {phase!r}: forward or train")
    return phase


def _fmt(value, kind: str) -> str:
    from rnnbench.study.table import fmt

    return fmt(value, kind)


# ---- JSON records ------------------------------------------------------------------------
JSON_FORMATS = {
    "x": format_ratio,
    "pct": lambda v: f"{100 * v:.0f}%",
    "ms": lambda v: f"{_fmt(v, 'ms')} ms",
    "us": lambda v: f"{v:.3g} us",
    "s": lambda v: f"{v:.3g} s",
    "gflops": lambda v: f"{_fmt(v, 'g')} GFLOP/s",
    "mib": lambda v: f"{v:.0f} MiB",
}


def json_value(root: Path, path: str, dotted: str):
    file = root / path
    if not file.is_file():
        raise FigureError(f"no JSON file {path}")
    value = json.loads(file.read_text())
    for part in dotted.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise FigureError(f"{path} has no {dotted!r} (at {part!r})")
    return value


def format_json(value, spec: str | None) -> str:
    if spec is None:
        return f"{value:g}" if isinstance(value, float) else str(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise FigureError(f"format {spec!r} needs a number, got {value!r}")
    if spec in JSON_FORMATS:
        return JSON_FORMATS[spec](value)
    try:
        return format(value, spec)
    except ValueError:
        raise FigureError(f"format {spec!r}: one of {', '.join(JSON_FORMATS)} or a Python format spec") from None
