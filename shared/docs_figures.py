"""Every measured figure of README.md and docs/*.md, rendered from committed records: `rnnbench docs`.

A figure in a page is written

    <!--fig KEY-->TEXT<!--/fig-->           inline: TEXT is what `render(KEY)` gives
    <!--begin KEY-->                        a generated block (a table): the body is
    (blank line, the table, blank line)     "\\n\\n" + render_block(KEY) + "\\n\\n"
    <!--end KEY-->

`rnnbench docs` (`make docs`) rewrites every TEXT and block body from the records, in place.
`rnnbench docs --check` changes nothing and exits 1 listing every figure whose text is not its
rendering, every key that has no record, and every hand-written measured figure (a number with a
unit of measurement outside code blocks and marked figures: `unmarked_figures`).
`rnnbench docs --show KEY` prints one key's rendering (to write a new figure). A marker inside
code (fenced or inline) is the syntax shown, not a figure; a marker that opens a line is refused
(Markdown reads such a line as an HTML block, not as text).

Keys. PHASE is `forward` or `train` (forward+backward); DTYPE is a precision name, `float32` when
left out; ROOF is `machine` (every GEMM library of both frameworks, the default), `torch`, `xla`,
`own` (the rung's own framework's; `fraction` only) or one library (`mm`, `onednn`, `chain_torch`,
`chain_xla`: `study.table.ROOF_LIBS`; `xla` is XLA's roof, its dot and chained loop together);
SHAPE is `step` or `input` (one GEMM shape).
`study:` keys read the committed study records, `docs/study/results.jsonl`, through the study's own
table code (`shared.study.table`):

    study:ratio/IMPL/CELL/WORKLOAD/PHASE[/DTYPE]    time over float32 torch.native of the cell's
                                                    family, same workload and run   1.15x  (or
                                                    1.15x [1.11, 1.19] with an interval)
    study:ms/IMPL/CELL/WORKLOAD/PHASE[/DTYPE]       median time                     112 ms
    study:gflops/IMPL/CELL/WORKLOAD/PHASE           GFLOP/s                         180.3 GFLOP/s
    study:fraction/IMPL/CELL/WORKLOAD/PHASE[/ROOF]  GFLOP/s over a roof             78%
    study:roof/CELL/WORKLOAD[/ROOF[/SHAPE]]         a GEMM roof of the run          213.4 GFLOP/s
    study:drift[/CELL/WORKLOAD]                     the largest change of a GEMM
                                                    rate between the run's start
                                                    and end (of all roofs, or one)  94%
    study:first/IMPL/CELL/WORKLOAD/PHASE[/warm]     first call (trace + compile):   4.52 s
                                                    the first process's (cold compile
                                                    cache) or, /warm, the median of
                                                    the later processes' (warm cache)
    study:fastest/CELL/WORKLOAD/PHASE[/FRAMEWORK]   the report's "what to use"      `torch.native`
    study:run/FIELD                                 commit, date, measurements, minutes, threads,
                                                    cpu, torch, jax

    study@PATH:KIND/...             the same keys read from another committed run's records
                                    (PATH: its results.jsonl or the folder holding it), e.g. a
                                    run of scripts/reproducibility.py

    json:PATH:DOTTED.KEY[:FORMAT]   a value of a committed JSON file (PATH from the repository root;
                                    list items by index: `runs.0.ratio`); FORMAT: x (a ratio, as
                                    above), pct (a fraction as a percentage), ms, us, s (a value in
                                    that unit), gflops, mib, or a Python format spec (`.2f`)

Blocks:

    study:table/FRAMEWORK/COL,COL,...   ratios to native, one row per implementation (FRAMEWORK: all,
                                        torch or jax), one column per COL = CELL/WORKLOAD/PHASE[/DTYPE];
                                        torch.native's float32 cells add its time; n/s: not supported,
                                        ⚠: flagged under the report's Sanity

Imports no framework (nothing in `shared/` does).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from functools import cached_property
from pathlib import Path

from .study.formatting import format_ratio, ratio_interval

ROOT = Path(__file__).resolve().parents[1]
STUDY_RECORDS = "docs/study/results.jsonl"
PHASES = {"forward": "fwd", "train": "fwd+bwd"}
ROOFS = ("machine", "torch", "xla", "own")

FIG = re.compile(r"<!--fig (?P<key>[^<>\s]+)-->(?P<text>.*?)<!--/fig-->", re.DOTALL)
BLOCK = re.compile(r"<!--begin (?P<key>[^<>\s]+)-->(?P<text>.*?)<!--end (?P=key)-->", re.DOTALL)
FENCE = re.compile(r"^```[^\n]*\n.*?^```[^\n]*$", re.DOTALL | re.MULTILINE)


class FigureError(ValueError):
    """A key that cannot be rendered: malformed, or no record holds it."""


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose figures are rendered and checked: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# ---- the study records -----------------------------------------------------------------
class Study:
    """One results file read once through the study's table code."""

    def __init__(self, path: Path):
        from .study.runner import read_records
        from .study.table import collect

        self.path = Path(path)
        self.res = collect(read_records(self.path))
        if not self.res.measurements:
            raise FigureError(f"{self.path}: no measurement records")

    @cached_property
    def rows(self) -> list[dict]:
        from .study.table import table_rows

        return table_rows(self.res)

    @cached_property
    def precision_rows(self) -> list[dict]:
        from .study.table import precision_rows

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
        from .study.table import roof_framework

        _phase(phase)
        row = self.row(impl, cell, workload)
        scope = roof_framework(row["framework"]) if roof == "own" else roof
        rate = self._roof_rate(cell, workload, scope)
        return _fmt(self.value(row, f"gflops_{phase}", "GFLOP/s") / rate, "%")

    def roof(self, cell, workload, roof="machine", shape=None) -> str:
        return f"{_fmt(self._roof_rate(cell, workload, roof, shape), 'g')} GFLOP/s"

    def _roof_rate(self, cell, workload, roof, shape=None) -> float:
        from .study.table import ROOF_LIBS

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
        from .study.table import what_to_use

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
        from .cells import STANDARD_CELLS

        head = ["implementation"] + [f"{c.upper() if c in STANDARD_CELLS else c} {w} {PHASES[p]}"
                                     + ("" if d == "float32" else f" {d}") for c, w, p, d in cols]
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(cols)]
        for impl, _, _ in order:
            lines.append("| " + " | ".join([impl] + [self._table_cell(impl, *col) for col in cols]) + " |")
        return "\n".join(lines)

    def _table_cell(self, impl, cell, workload, phase, dtype) -> str:
        from .study.table import NATIVE

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
    from .study.table import fmt

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


# ---- rendering ---------------------------------------------------------------------------
class Renderer:
    """Renders keys from the records under `root`; each records file is read once."""

    INLINE = ("ratio", "ms", "gflops", "fraction", "roof", "drift", "first", "fastest", "run")

    def __init__(self, root: Path = ROOT):
        self.root = Path(root)
        self._studies: dict[str, Study] = {}

    @property
    def study(self) -> Study:
        return self.study_at(STUDY_RECORDS)

    def study_at(self, path: str) -> Study:
        """The records of `path` (a committed results.jsonl, or a folder holding one)."""
        if path not in self._studies:
            file = self.root / path
            if file.is_dir():
                file = file / "results.jsonl"
            if not file.is_file():
                raise FigureError(f"no study records at {path}")
            self._studies[path] = Study(file)
        return self._studies[path]

    def render(self, key: str) -> str:
        source, _, rest = key.partition(":")
        if source == "study" or source.startswith("study@"):
            study = self.study_at(source.partition("@")[2] or STUDY_RECORDS)
            kind, _, args = rest.partition("/")
            if kind not in self.INLINE:
                raise FigureError(f"{key}: study:KIND/... with KIND one of {', '.join(self.INLINE)}")
            try:
                return getattr(study, kind)(*(args.split("/") if args else ()))
            except TypeError:
                raise FigureError(f"{key}: wrong number of parts (see shared/docs_figures.py)") from None
        if source == "json":
            parts = rest.split(":")
            if len(parts) not in (2, 3):
                raise FigureError(f"{key}: json:PATH:DOTTED.KEY[:FORMAT]")
            return format_json(json_value(self.root, parts[0], parts[1]), parts[2] if len(parts) == 3 else None)
        raise FigureError(f"{key}: a key starts with study:, study@PATH: or json:")

    def render_block(self, key: str) -> str:
        source, _, rest = key.partition(":")
        kind, _, spec = rest.partition("/")
        if (source == "study" or source.startswith("study@")) and kind == "table":
            return self.study_at(source.partition("@")[2] or STUDY_RECORDS).table(spec)
        raise FigureError(f"{key}: a block key is study:table/FRAMEWORK/COL,... (or study@PATH:table/...)")


def block_body(table: str) -> str:
    return f"\n\n{table}\n\n"


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# what may open a Markdown line before its text: indentation, list items, block quotes
_LINE_MARKERS = re.compile(r"^(?:\s*(?:[-*+>]|\d+[.)])(?=\s))*\s*")


INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def _in_code(text: str):
    """A test `pos -> bool`: is `pos` inside fenced code or an inline code span of `text`?
    (A marker written in code is the syntax shown, not a figure.)"""
    spans = [m.span() for m in FENCE.finditer(text)]
    blanked = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    spans += [m.span() for m in INLINE_CODE.finditer(blanked)]
    return lambda pos: any(a <= pos < b for a, b in spans)


def render_page(text: str, renderer: Renderer) -> tuple[str, list[str]]:
    """(the page with every figure and block rendered, the problems: keys that cannot be rendered,
    figures placed where Markdown would not read them as text).  Each problem starts with its line.
    Markers inside code (fenced or inline) are left alone."""
    problems: list[str] = []
    in_code = _in_code(text)

    def block(m):
        if in_code(m.start()):
            return m.group(0)
        try:
            return f"<!--begin {m['key']}-->{block_body(renderer.render_block(m['key']))}<!--end {m['key']}-->"
        except FigureError as e:
            problems.append(f"{_line(text, m.start())}: {e}")
            return m.group(0)

    def fig(m):
        start = m.start()
        if out_in_code(start):
            return m.group(0)
        if not _LINE_MARKERS.sub("", out[out.rfind("\n", 0, start) + 1:start]).strip():
            problems.append(f"{_line(out, start)}: {m['key']}: a figure that opens a line (or a list item) is "
                            "read as an HTML block; put a word before it")
        try:
            return f"<!--fig {m['key']}-->{renderer.render(m['key'])}<!--/fig-->"
        except FigureError as e:
            problems.append(f"{_line(out, start)}: {e}")
            return m.group(0)

    for opener, pattern, form in (("<!--fig", FIG, "<!--fig KEY-->TEXT<!--/fig-->"),
                                  ("<!--begin", BLOCK, "<!--begin KEY--> ... <!--end KEY-->")):
        starts = {m.start() for m in pattern.finditer(text)}
        problems += [f"{_line(text, m.start())}: a marker that is not {form}"
                     for m in re.finditer(re.escape(opener), text) if m.start() not in starts and not in_code(m.start())]
    out = BLOCK.sub(block, text)
    out_in_code = _in_code(out)
    out = FIG.sub(fig, out)
    return out, problems


def differences(old: str, new: str) -> list[str]:
    """The figures and blocks whose text changed between two renderings of a page: `LINE: KEY: old -> new`."""
    found = []
    for pattern in (FIG, BLOCK):
        olds, news = list(pattern.finditer(old)), list(pattern.finditer(new))
        for a, b in zip(olds, news):
            if a["text"] != b["text"]:
                was, now = (a["text"].strip(), b["text"].strip()) if pattern is FIG else ("(block)", "(re-rendered)")
                found.append(f"{_line(old, a.start())}: {a['key']}: the page says {was!r}, the records {now!r}")
    return found


# ---- hand-written figures ------------------------------------------------------------------
_NUM = r"[~±+-]*\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# a number (or a range of two) and a unit of measurement; or `x1.16`, a factor written before its number
MEASURED = re.compile(
    rf"(?<![\w.]){_NUM}(?:\s?(?:-|–|to)\s?{_NUM})?"
    r"(?:x(?!\w)|×|\s?(?:ms|us|µs|ns|GFLOP/s|TFLOP/s|%|MiB|GiB|min|minutes)(?![\w/])|\ss(?![\w/]))"
    r"|(?<![\w.])[x×]\d+(?:\.\d+)?(?![\w.])")
# A number right after one of these is a bound or a target (`<= 1.1x`, `>= 80%`), not a measurement.
BOUND_WORDS = ("<=", ">=", "≤", "≥")
# Numbers with units that are definitions, not measurements: (pattern, why). Keep it short.
# Each pattern must match at the figure itself (not merely near it).
ALLOWED: list[tuple[re.Pattern, str]] = [
    (re.compile(r"95%(?=\s(?:interval|confidence|CI)\b)"), "the confidence level of an interval, not a measurement"),
]
# Pages another developer is converting right now: checked for marked figures, not yet for unmarked
# ones. Remove an entry once its page passes `rnnbench docs --check`.
TEMPORARILY_EXEMPT = {
}


def prose(text: str) -> str:
    """The page with fenced code, generated blocks and marked figures blanked (line numbers kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))

    return FIG.sub(blank, BLOCK.sub(blank, FENCE.sub(blank, text)))


def unmarked_figures(text: str) -> list[str]:
    """`LINE: FIGURE` for every number with a unit outside code, blocks and marked figures, that is
    neither a bound (`<= 1.1x`) nor allowed by `ALLOWED`."""
    plain = prose(text)
    found = []
    for m in MEASURED.finditer(plain):
        before = plain[max(0, m.start() - 3):m.start()].rstrip()
        if before.endswith(BOUND_WORDS):
            continue
        if any(p.match(plain, m.start()) for p, _ in ALLOWED):
            continue
        found.append(f"{_line(plain, m.start())}: {m.group(0).strip()}")
    return found


# ---- the command ---------------------------------------------------------------------------
def run(root: Path = ROOT, *, check: bool, out=print) -> int:
    """Render (or, with `check`, verify) every page; return the exit status."""
    renderer = Renderer(root)
    failed = False
    for page in pages(root):
        name = page.relative_to(root).as_posix()
        text = page.read_text()
        new, problems = render_page(text, renderer)
        changed = differences(text, new)
        if check:
            problems = changed + problems
        elif new != text:
            page.write_text(new)
            out(f"{name}: {len(changed)} figure(s) rendered again")
        if name not in TEMPORARILY_EXEMPT:
            problems += [f"{p}: a measured figure written by hand (mark it: <!--fig KEY-->...<!--/fig-->)"
                         for p in unmarked_figures(new)]
        for p in problems:
            out(f"{name}:{p}")
        failed |= bool(problems)
    if check and not failed:
        out("every figure matches its record")
    return 1 if failed else 0


def cmd_docs(args) -> int:
    root = Path(args.root)
    if args.show:
        renderer = Renderer(root)
        try:
            for key in args.show:
                print(renderer.render_block(key) if key.startswith("study:table/") else renderer.render(key))
        except FigureError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    return run(root, check=args.check)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "docs", help="render every figure of README.md and docs/*.md from the committed records",
        description="Rewrite every <!--fig KEY-->...<!--/fig--> and <!--begin KEY-->...<!--end KEY--> of "
                    "README.md and docs/*.md from the committed records (docs/study/results.jsonl, JSON "
                    "files); --check changes nothing and exits 1 listing every figure that disagrees, has "
                    "no record, or is written by hand.  Key grammar: shared/docs_figures.py.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 on any disagreement")
    p.add_argument("--show", action="append", metavar="KEY", help="print what KEY renders to (repeatable)")
    p.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_docs)
