"""The pages: where the figures are (`FIG`, `BLOCK` markers), how a page is rendered again from the
records (`Renderer`, `render_page`), and which numbers look measured but are written by hand
(`unmarked_figures`)."""

from __future__ import annotations

import re
from pathlib import Path

from .records import ROOT, STUDY_RECORDS, FigureError, Study, format_json, json_value

FIG = re.compile(r"<!--fig (?P<key>[^<>\s]+)-->(?P<text>.*?)<!--/fig-->", re.DOTALL)
BLOCK = re.compile(r"<!--begin (?P<key>[^<>\s]+)-->(?P<text>.*?)<!--end (?P=key)-->", re.DOTALL)
FENCE = re.compile(r"^```[^\n]*\n.*?^```[^\n]*$", re.DOTALL | re.MULTILINE)


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose figures are rendered and checked: README.md, docs/*.md, and the notes a
    record keeps beside itself (docs/records/**/README.md; not the generated index)."""
    notes = sorted(p for p in (root / "docs" / "records").rglob("README.md") if p.parent != root / "docs" / "records")
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *notes]


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
                raise FigureError(f"{key}: wrong number of parts (see tools/docs_figures/__init__.py)") from None
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
# ones. Remove an entry once its page passes `python -m tools.docs_figures --check`.
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
