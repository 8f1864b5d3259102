"""What asv recorded for two commits: the benchmarks measured at HEAD that have no result at BASE.

    python -m tools.asv_results RESULTS_DIR BASE_SHA HEAD_SHA [BENCH_REGEX]

`tools/bench_compare.sh` calls it after `asv continuous`: a benchmark with no result at
BASE (it failed or did not exist there) is not compared, so the gate says so instead of
passing in silence.  Prints one line per such benchmark; exit status 0 when every HEAD
result has a BASE result, 1 when some lack one, 2 when none has one (or nothing was
measured at HEAD).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from pathlib import Path


def measured(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def load(results_dir: Path, commit: str, bench: str = "") -> dict[str, float | None]:
    """{"name(params)": value} over every machine's result files of `commit` (asv 0.6 layout:
    <machine>/<sha[:8]>-<env>.json, results[name] = [values, params, ...])."""
    out: dict[str, float | None] = {}
    pattern = re.compile(bench) if bench else None
    for path in sorted(Path(results_dir).glob(f"*/{commit[:8]}-*.json")):
        data = json.loads(path.read_text())
        for name, entry in data.get("results", {}).items():
            values, params = entry[0], entry[1] if len(entry) > 1 else []
            if not isinstance(values, list):
                values = [values]
            combos = list(itertools.product(*params)) if params else [()]
            for combo, value in zip(combos, values):
                key = f"{name}({', '.join(combo)})" if combo else name
                if pattern and not pattern.search(key):  # asv's -b matches names with their parameters
                    continue
                if measured(value) or key not in out:
                    out[key] = value
    return out


def without_base(results_dir: Path, base: str, head: str, bench: str = "") -> tuple[list[str], list[str]]:
    """(benchmarks measured at HEAD, those of them with no result at BASE)."""
    at_head = [k for k, v in load(results_dir, head, bench).items() if measured(v)]
    at_base = load(results_dir, base, bench)
    return at_head, [k for k in at_head if not measured(at_base.get(k))]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    results_dir, base, head = Path(argv[0]), argv[1], argv[2]
    at_head, missing = without_base(results_dir, base, head, argv[3] if len(argv) == 4 else "")
    for key in missing:
        print(key)
    if not at_head or len(missing) == len(at_head):
        return 2
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
