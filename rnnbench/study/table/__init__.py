"""From the JSON-lines records to the tables: ratios to torch.native, roof fractions, ladders.

Every ratio is taken between two measurements of the same results file, cell, workload,
device and dtype: measured side by side, which is what holds on a shared, noisy machine.
Its modules, one idea each:

- `results`: `collect`, the records of a results file into `Results` (the latest record per
  key, the processes of a measurement pooled, the GEMM roofs derived);
- `rows`: `table_rows`, one row per measurement with the derived columns, and `sanity_flags`;
- the five tables, each its rows and its Markdown / terminal forms: `main` (the results
  table, and its CSV), `custom` (custom cells against their plain cells), `ladders` (each
  framework's rungs, what each buys), `reduced_precision` (each rung in each precision), `choice`
  (`what_to_use`: the fastest rung, or a tie within noise).

How values are written is `rnnbench.study.formatting`'s; the roof's rates and its derivation are
the measurement core's (`rnnbench.measure.roof`).
"""

from ..formatting import fmt, fmt_ratio
from .choice import MODES, native_interval, unstable_baseline, what_to_use, what_to_use_markdown, winner_text
from .custom import (
    CUSTOM_COLUMNS, PLAIN_NATIVE, custom_cell_rows, custom_cell_skips, custom_markdown, custom_rich,
    is_custom_cell)
from .ladders import LADDER_COLUMNS, ladder, ladder_markdown, ladder_rich
from .main import COLUMNS, CSV_FIELDS, formatted, markdown_table, rich_table, write_csv
from .reduced_precision import PRECISION_COLUMNS, precision_markdown, precision_rich, precision_rows
from .results import Results, collect, pool_processes
from .rows import (
    NATIVE, NOISY_IQR, UNSTABLE_BASELINE, parity_note, parity_of, parity_ok_of, parity_ratio_of, plain_family,
    flagged_keys, sanity_flags, table_rows)
