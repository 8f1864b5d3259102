"""How calls are timed: alone, in pairs with a baseline, and best-of-windows for the GEMM roof.

- `time_calls`: a phase's samples of one callable (the study's rows without a baseline);
- `time_pairs`: (candidate, baseline) samples of adjacent calls, alternating which side goes
  first (the study's paired ratios, `rnnbench.measure.stats`);
- `best_call_seconds`: the best mean time of one call over a few windows, the device
  synchronized at the end of each chunk (the GEMM rates of the roof, which the framework
  adapters' `gemm_gflops` measure with it);
- `summarize`: median and IQR of samples.

Every callable synchronizes the device itself (the `rnnbench.core.adapter.Workload` protocol), except
`best_call_seconds`' which is given its `sync`.  Imports no framework.
"""

from __future__ import annotations

import statistics
import time

MAX_TIMED_CALLS = 1000  # per phase, however fast the call and however long --min-time
PAIR_ORDER_SETTLE_S = 0.001  # idle before every paired call: the other side's threads stop spinning
MIN_PAIRS = 5
MAX_PAIRS = 200
ROOF_WINDOWS = 5


def summarize(samples: list[float]) -> dict:
    """Median and interquartile range of timing samples (seconds)."""
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q = statistics.quantiles(ordered, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = 0.0
    return {"median": statistics.median(ordered), "iqr": iqr, "min": ordered[0], "n": len(ordered)}


def timed(fn) -> float:
    """Seconds of one call of `fn`."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_calls(fn, repeats: int, budget_s: float, min_samples: int = 3, min_time_s: float = 0.0,
               max_samples: int = MAX_TIMED_CALLS) -> list[float]:
    """Time `fn()` `repeats` times; stop early (after `min_samples`) past `budget_s`.

    Calls faster than `min_time_s / repeats` are timed on until the phase has run
    `min_time_s` (at most `max_samples` calls): ten calls of a 2 ms step are one 20 ms
    window, too short to see past the machine's jitter.
    """
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        if len(samples) >= min(min_samples, repeats) and elapsed > budget_s:
            break
        if len(samples) >= repeats and (elapsed >= min_time_s or len(samples) >= max_samples):
            break
    return samples


def time_pairs(candidate, baseline, budget_s: float, min_pairs: int = MIN_PAIRS, max_pairs: int = MAX_PAIRS,
               min_time_s: float = 0.0) -> list[tuple[float, float]]:
    """(candidate_s, baseline_s) of adjacent calls, alternating which side goes first.

    At least `min_pairs`; then on while under `budget_s` or under `min_time_s` (fast calls:
    a short window sees only the machine's jitter), at most `max_pairs`.  A short sleep
    before each call lets the previous call's thread pool go idle (torch's OpenMP threads
    spin a while after a parallel region), so neither side runs beside the other's spinners.
    """
    pairs: list[tuple[float, float]] = []
    start = time.perf_counter()
    while True:
        times = {}
        for side in (("baseline", "candidate") if len(pairs) % 2 == 0 else ("candidate", "baseline")):
            time.sleep(PAIR_ORDER_SETTLE_S)
            t0 = time.perf_counter()
            (candidate if side == "candidate" else baseline)()
            times[side] = time.perf_counter() - t0
        pairs.append((times["candidate"], times["baseline"]))
        elapsed = time.perf_counter() - start
        if len(pairs) >= max_pairs:
            break
        if len(pairs) >= min_pairs and elapsed >= budget_s and elapsed >= min_time_s:
            break
    return pairs


def best_call_seconds(fn, sync, min_time: float) -> float:
    """Best (over ROOF_WINDOWS batches) mean time of one call: the roof is an upper bound.

    Calls run in chunks that double until a batch lasts `min_time`; the device is
    synchronized at the end of each chunk, not after every call.
    """
    for _ in range(3):
        fn()
    sync()
    best = float("inf")
    for _ in range(ROOF_WINDOWS):
        n, chunk, t0 = 0, 1, time.perf_counter()
        while True:
            for _ in range(chunk):
                fn()
            n += chunk
            sync()
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                break
            chunk = min(2 * chunk, 1024)
        best = min(best, elapsed / n)
    return best
