"""Largest error / derived bound per rung and precision over every shared vector.

    python scripts/precision_errors.py bfloat16,amp_bfloat16 [torch.eager,jax.scan,...]

Prints one line per rung and precision: how many arrays were compared, how many cases
raised, the worst error over its bound (<= 1 passes; docs/precision.md quotes these).
"""

from __future__ import annotations

import sys
import time

from shared import parity, registry
from shared.tolerances import bounds, case_sizes, max_errors
from shared.vectors import load_cases


def main(argv: list[str]) -> int:
    dtypes = argv[0].split(",") if argv else ["bfloat16", "amp_bfloat16"]
    impls = argv[1].split(",") if len(argv) > 1 else registry.available("cpu")
    cases = list(load_cases())
    for impl in impls:
        row, t0 = registry.get(impl), time.time()
        for dtype in dtypes:
            worst, where, compared, failed = 0.0, None, 0, 0
            for case in cases:
                if row.unsupported_reason(case.spec, lengths=case.lengths is not None, dtype=dtype, device="cpu"):
                    continue
                try:
                    got = row.adapter().run_case(case.spec, case.params, **parity.case_inputs(case),
                                                 cotangents=case.cotangents, dtype=dtype)
                except Exception as e:  # noqa: BLE001 - reported, the sweep goes on
                    failed += 1
                    print(f"  {impl} {case.name} {dtype}: {type(e).__name__}: {e}"[:300])
                    continue
                expected = parity.expected_results(case)
                limits = bounds(expected, dtype, case.spec, *case_sizes(case.spec, case.x))
                for key, err in max_errors(expected, got).items():
                    compared += 1
                    if err / limits[key] > worst:
                        worst, where = err / limits[key], f"{case.name} {key}"
            print(f"{impl:18s} {dtype:13s} arrays={compared} raised={failed} worst error/bound={worst:.3f} ({where}) "
                  f"{time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
