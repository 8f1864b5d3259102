"""The worker's earlier place, kept working with a `DeprecationWarning` (`shared.deprecation`).

`python -m shared.study.worker COMMAND --job FILE --result FILE` runs `shared.measure.worker`;
each name this module held is read from its module of the measurement core (`shared.measure`).
"""

import sys

from ..deprecation import moved_names, warn

_CORE = "shared.measure"
__getattr__ = moved_names(__name__, "shared.study.worker", {
    "write_json": f"{_CORE}.isolated",
    **{name: f"{_CORE}.timing" for name in ("summarize", "MAX_TIMED_CALLS", "time_calls", "timed",
                                             "PAIR_ORDER_SETTLE_S", "MIN_PAIRS", "MAX_PAIRS", "time_pairs",
                                             "ROOF_WINDOWS", "best_call_seconds")},
    **{name: f"{_CORE}.measurement" for name in ("peak_rss_bytes", "current_rss_bytes", "load_adapter",
                                                  "framework_of", "measure")},
    **{name: f"{_CORE}.parity_check" for name in ("PARITY_CASES", "parity")},
    "roof_rows": f"{_CORE}.roof", "roof": f"{_CORE}.roof:measure_roof",
    "probe": f"{_CORE}.probe", "pin_threads": f"{_CORE}.threads",
    **{name: f"{_CORE}.worker" for name in ("COMMANDS", "main")},
})

if __name__ == "__main__":
    warn("shared.study.worker", name="python -m shared.study.worker", new="python -m shared.measure.worker")
    from ..measure.worker import main

    sys.exit(main())
