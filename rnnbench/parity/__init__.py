"""Cross-framework parity: every implementation x every shared vector x dtype, one matrix.

`run_matrix` runs each available registered implementation (`rnnbench.core.registry`) on each
shared vector (`rnnbench.vectors`) through its adapter and compares outputs, final states
and every gradient with the float64 reference values stored in the vector, using the
one tolerance policy (`rnnbench.core.tolerances`).  A cell is

- "pass"  every compared array's max error is within its derived bound (`rnnbench.core.tolerances`),
- "fail"  some array exceeds it (the cell names the worst one),
- "error" the adapter raised (the cell keeps the exception text),
- "n/s"   the configuration is not supported by that implementation (with the reason).

Implementations that cannot run on this machine are listed with their reason.

`rnnbench parity` prints the matrix (rich), rows implementations, one table per feature
group, and writes the same as JSON and Markdown (default under reports/parity/); it exits
non-zero when any cell failed or errored.  `rnnbench parity --training` adds the
identical-training report (torch.optim vs optax, see `training_parity`).

Its modules: `runner` (running and judging the cells), `report` (JSON, Markdown, the console
table), `command` (`rnnbench parity`).  None imports torch or jax at import time: adapters load
lazily.
"""

from __future__ import annotations

from .command import register, select_cases
from .report import (
    ABBREVIATION_LEGEND, TOLERANCE_RULE, render, render_training, short_name, to_json, to_markdown,
    training_markdown, training_parity)
from .runner import (
    FEATURE_GROUPS, GROUP_ORDER, OPTIONS_GROUP, SLOW_IMPLS, CellResult, ParityReport, case_cost, case_inputs,
    covering_cases, expected_results, feature_group, is_slow, run_cell, run_matrix, supported_in_any_dtype,
    unsupported_reason)

__all__ = ["CellResult", "ParityReport", "FEATURE_GROUPS", "GROUP_ORDER", "OPTIONS_GROUP", "feature_group",
           "expected_results", "case_inputs", "case_cost", "unsupported_reason", "run_cell", "run_matrix",
           "covering_cases", "SLOW_IMPLS", "is_slow", "supported_in_any_dtype", "short_name", "TOLERANCE_RULE",
           "ABBREVIATION_LEGEND", "to_json", "to_markdown", "render", "training_parity", "training_markdown",
           "render_training", "select_cases", "register"]
