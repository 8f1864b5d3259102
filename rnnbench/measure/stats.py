"""Ratios with an uncertainty: paired samples within a process, pooled over processes.

The study times a rung and its baseline (float32 nn.LSTM / nn.GRU) alternately in one process:
pair i is (rung time, baseline time) of two adjacent calls, so drift that moves both (another
process waking up, the CPU clocking down) cancels in their ratio.  It cannot cancel what
differs between processes: a whole process lands in a slow or a fast state (memory placement,
which core the threads got, a compile that went another way) and the state of one rung moves
independently of its baseline's.  So the unit of replication is the process, and the interval
comes from several of them.

Estimator, per ratio:

- per process: the median of its pairwise ratios (robust to a few disturbed pairs; unlike the
  minimum it does not reward a lucky call, and unlike the mean it ignores a pair hit by a burst);
- pooled: the geometric mean of the per-process medians (every process weighs the same; a
  ratio's scale is multiplicative, so 0.5x and 2x are equally far from 1x);
- interval: Student's t over the processes' log medians (n - 1 degrees of freedom).  Each
  process median already carries its own pairs' noise, so the spread between processes holds
  both levels.  A percentile bootstrap over so few units (3-5) cannot reach its nominal level:
  resampling three values sees only ten distinct means and never a value beyond them, and on
  the committed reproducibility runs its intervals held another run's value less often than
  the t interval's did (tools/experiments/interval_methods.py).
- one process: a percentile bootstrap over its pairs, which covers only the noise within it;
  `is_tight` never accepts it and the report says how many processes a ratio rests on.
"""

from __future__ import annotations

import math
import random
import statistics

CONFIDENCE = 0.95
BOOTSTRAP = 2000  # resamples of the one-process fallback
TARGET_HALF_WIDTH = 0.03  # an interval within +-3% of its ratio is tight


def pair_ratios(pairs) -> list[float]:
    """Candidate over baseline for every (candidate_s, baseline_s) pair with a positive baseline."""
    return [c / b for c, b in pairs if b is not None and b > 0 and c is not None]


def process_ratio(pairs) -> float | None:
    """The estimate of one process: the median of its pairwise ratios."""
    ratios = pair_ratios(pairs)
    return statistics.median(ratios) if ratios else None


def _geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def percentile_interval(boot: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The two-sided percentile interval of sorted bootstrap values: the values at ranks
    floor(a (n-1)) and ceil((1-a) (n-1)), a = (1 - confidence) / 2 (outward rounding: never
    narrower than the nominal level)."""
    tail = (1 - confidence) / 2
    n = len(boot)
    return boot[int(math.floor(tail * (n - 1)))], boot[int(math.ceil((1 - tail) * (n - 1)))]


def t_interval(per_process: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of the geometric mean of two or more process ratios: mean +- t * s / sqrt(n)
    on their logarithms, back on the ratio scale."""
    logs = [math.log(v) for v in per_process]
    n = len(logs)
    mean = sum(logs) / n
    half = t_quantile(0.5 + confidence / 2, n - 1) * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(mean - half), math.exp(mean + half)


def pooled_ratio(processes, *, confidence: float = CONFIDENCE, n_boot: int = BOOTSTRAP, seed: int = 0) -> dict | None:
    """The ratio of several processes' paired samples, with its interval.

    `processes`: one list of (candidate_s, baseline_s) pairs per process.  Returns
    {"ratio", "lo", "hi", "half_width" (the larger side, relative to the ratio), "processes",
    "pairs", "per_process", "method"} or None when no process has a pair.  `n_boot` and `seed`
    drive the one-process bootstrap only.
    """
    ratios = [pair_ratios(p) for p in processes]
    ratios = [r for r in ratios if r]
    if not ratios:
        return None
    per_process = [statistics.median(r) for r in ratios]
    estimate = _geomean(per_process)
    if len(ratios) >= 2:
        lo, hi = t_interval(per_process, confidence)
        method = "t"
    else:
        rng = random.Random(seed)
        boot = sorted(statistics.median(rng.choices(ratios[0], k=len(ratios[0]))) for _ in range(n_boot))
        lo, hi = percentile_interval(boot, confidence)
        method = "pairs"
    lo, hi = min(lo, estimate), max(hi, estimate)
    return dict(ratio=estimate, lo=lo, hi=hi, half_width=max(estimate - lo, hi - estimate) / estimate,
                processes=len(ratios), pairs=sum(len(r) for r in ratios), per_process=per_process, method=method)


def is_tight(summary: dict | None, target: float = TARGET_HALF_WIDTH) -> bool:
    return bool(summary) and summary["processes"] >= 2 and summary["half_width"] <= target


def compare(a: dict | None, b: dict | None) -> str | None:
    """"<" when a's interval lies wholly below b's, ">" when wholly above, "=" when they overlap (a tie
    within noise); None when either has no interval (records measured without pairs)."""
    if not a or not b or a.get("lo") is None or b.get("lo") is None:
        return None
    if a["hi"] < b["lo"]:
        return "<"
    if a["lo"] > b["hi"]:
        return ">"
    return "="
