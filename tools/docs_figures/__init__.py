"""Every measured figure of README.md and docs/*.md, rendered from committed records: `python -m tools.docs_figures`.

A figure in a page is written

    <!--fig KEY-->TEXT<!--/fig-->           inline: TEXT is what `render(KEY)` gives
    <!--begin KEY-->                        a generated block (a table): the body is
    (blank line, the table, blank line)     "\\n\\n" + render_block(KEY) + "\\n\\n"
    <!--end KEY-->

`python -m tools.docs_figures` (`make docs`) rewrites every TEXT and block body from the records, in place.
`python -m tools.docs_figures --check` changes nothing and exits 1 listing every figure whose text is not its
rendering, every key that has no record, and every hand-written measured figure (a number with a
unit of measurement outside code blocks and marked figures: `unmarked_figures`).
`python -m tools.docs_figures --show KEY` prints one key's rendering (to write a new figure). A marker inside
code (fenced or inline) is the syntax shown, not a figure; a marker that opens a line is refused
(Markdown reads such a line as an HTML block, not as text).

Keys. PHASE is `forward` or `train` (forward+backward); DTYPE is a precision name, `float32` when
left out; ROOF is `machine` (every GEMM library of both frameworks, the default), `torch`, `xla`,
`own` (the rung's own framework's; `fraction` only) or one library (`mm`, `onednn`, `chain_torch`,
`chain_xla`: `rnnbench.measure.roof.ROOF_LIBS`; `xla` is XLA's roof, its dot and chained loop together);
SHAPE is `step` or `input` (one GEMM shape).
`study:` keys read the committed study records, `docs/records/full-2026-12-03/results.jsonl`, through the study's own
table code (`rnnbench.study.table`):

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
                                    run of tools/reproducibility.py

    json:PATH:DOTTED.KEY[:FORMAT]   a value of a committed JSON file (PATH from the repository root;
                                    list items by index: `runs.0.ratio`); FORMAT: x (a ratio, as
                                    above), pct (a fraction as a percentage), ms, us, s (a value in
                                    that unit), gflops, mib, or a Python format spec (`.2f`)

Blocks:

    study:table/FRAMEWORK/COL,COL,...   ratios to native, one row per implementation (FRAMEWORK: all,
                                        torch or jax), one column per COL = CELL/WORKLOAD/PHASE[/DTYPE];
                                        torch.native's float32 cells add its time; n/s: not supported,
                                        ⚠: flagged under the report's Sanity

Its modules: `records` (the study records and JSON files a key reads), `pages` (the markers,
rendering a page, hand-written figures), `command` (`python -m tools.docs_figures`, `make docs`).
Imports no framework.
"""

from __future__ import annotations

from .command import cmd_docs, register, run
from .pages import (
    ALLOWED, BLOCK, FENCE, FIG, TEMPORARILY_EXEMPT, Renderer, block_body, differences, pages, render_page,
    unmarked_figures)
from .records import ROOT, STUDY_RECORDS, FigureError, Study, format_json, json_value

__all__ = ["ROOT", "STUDY_RECORDS", "FIG", "BLOCK", "FENCE", "FigureError", "Study", "json_value", "format_json",
           "Renderer", "block_body", "pages", "render_page", "differences", "unmarked_figures", "ALLOWED",
           "TEMPORARILY_EXEMPT", "run", "cmd_docs", "register"]
