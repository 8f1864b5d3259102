"""The report directory of a run: report.md (the answer, machine, roof, tables, failures, ladders,
plots) and results.csv.  Its modules:

- `document`: `write_report`, the whole of report.md and its files, for one machine or across
  machines (`rnnbench.study.merge`);
- `context`: the first screen (`answer_markdown`, what `rnnbench compare` prints last), the
  machine, whether it was quiet (`quiet_verdict`), how it was measured, the workloads;
- `roof`: the GEMM rates measured, where the JAX-vs-torch gap comes from, the JAX targets;
- `sections`: first calls, threads, custom cells, precision, what to use, sanity, skipped.
"""

from .context import QUIET_OTHERS_SHARE, answer_markdown, quiet_verdict
from .document import write_report
from .roof import JAX_TARGET_ROOF, JAX_TARGET_X_NATIVE, ROOF_DRIFT

__all__ = ["answer_markdown", "quiet_verdict", "write_report", "QUIET_OTHERS_SHARE", "ROOF_DRIFT",
           "JAX_TARGET_X_NATIVE", "JAX_TARGET_ROOF"]
