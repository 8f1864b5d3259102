"""The study's statistics: paired ratios pooled over processes with a bootstrap interval."""

from __future__ import annotations

import random

import pytest

from shared.study.stats import compare, is_tight, pair_ratios, pooled_ratio, process_ratio
from shared.study.worker import time_pairs


def _process(ratio: float, n: int, noise: float, rng: random.Random):
    """n (candidate, baseline) pairs whose baseline wanders and whose ratio is `ratio` +- noise."""
    out = []
    for _ in range(n):
        base = 0.1 * (1 + rng.uniform(-0.3, 0.3))  # drift common to both sides cancels in the ratio
        out.append((base * ratio * (1 + rng.uniform(-noise, noise)), base))
    return out


def test_pairwise_ratio_cancels_drift_common_to_both_sides():
    pairs = [(0.2, 0.1), (0.4, 0.2), (0.3, 0.15), (9.0, 1.0)]  # the last pair was hit by a burst
    assert pair_ratios(pairs) == pytest.approx([2.0, 2.0, 2.0, 9.0])
    assert process_ratio(pairs) == pytest.approx(2.0)


def test_pooled_ratio_is_the_geometric_mean_of_process_medians_with_an_interval_around_it():
    rng = random.Random(0)
    processes = [_process(r, 9, 0.02, rng) for r in (1.10, 1.20, 1.15)]
    s = pooled_ratio(processes)
    assert s["processes"] == 3 and s["pairs"] == 27
    assert s["ratio"] == pytest.approx((s["per_process"][0] * s["per_process"][1] * s["per_process"][2]) ** (1 / 3))
    assert s["lo"] < 1.13 < 1.17 < s["hi"]  # spans the processes' disagreement, not just one process's noise
    assert s["half_width"] > 0.03 and not is_tight(s)
    agreeing = pooled_ratio([_process(1.15, 9, 0.01, rng) for _ in range(3)])
    assert is_tight(agreeing) and agreeing["lo"] <= 1.15 <= agreeing["hi"]


def test_interval_covers_the_true_ratio_about_as_often_as_it_claims():
    rng = random.Random(1)
    covered = 0
    trials = 60
    for i in range(trials):
        # process states: each process's true ratio scatters around 1.3 (what pairing cannot cancel)
        processes = [_process(1.3 * (1 + rng.gauss(0, 0.03)), 7, 0.05, rng) for _ in range(5)]
        s = pooled_ratio(processes, n_boot=400, seed=i)
        covered += s["lo"] <= 1.3 <= s["hi"]
    assert covered >= 0.8 * trials  # a nominal 95% percentile bootstrap on 5 processes: not far below


def test_one_process_still_gets_an_interval_and_says_so():
    s = pooled_ratio([[(2.0, 1.0), (2.2, 1.0), (1.8, 1.0)]])
    assert s["processes"] == 1 and s["lo"] <= 2.0 <= s["hi"]
    assert not is_tight(s)  # one process is never enough
    assert pooled_ratio([[]]) is None and pooled_ratio([]) is None


def test_compare_calls_overlap_a_tie():
    a, b = dict(lo=0.9, hi=1.0), dict(lo=1.05, hi=1.2)
    assert compare(a, b) == "<" and compare(b, a) == ">"
    assert compare(a, dict(lo=0.99, hi=1.1)) == "="
    assert compare(a, dict(lo=None, hi=None)) is None


def test_time_pairs_alternates_order_and_respects_its_limits():
    calls = []
    pairs = time_pairs(lambda: calls.append("c"), lambda: calls.append("b"), budget_s=0.0, min_pairs=4)
    assert len(pairs) == 4 and calls == ["b", "c", "c", "b", "b", "c", "c", "b"]
    assert all(c >= 0 and b >= 0 for c, b in pairs)
    assert len(time_pairs(lambda: None, lambda: None, budget_s=10.0, min_pairs=2, max_pairs=6)) == 6


def test_reproducibility_summary_counts_spread_and_values_inside_the_other_runs_intervals():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "reproducibility.py"
    spec = importlib.util.spec_from_file_location("reproducibility", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    runs = [{"a": dict(ratio=1.00, lo=0.97, hi=1.03), "b": dict(ratio=1.5, lo=1.45, hi=1.55)},
            {"a": dict(ratio=1.02, lo=0.99, hi=1.05), "b": dict(ratio=2.0, lo=1.9, hi=2.1)},
            {"a": dict(ratio=1.01, lo=0.98, hi=1.04)}]
    s = mod.summarize(runs)
    assert s["ratios"] == 1 and s["rows"][0]["key"] == "a"  # only ratios every run has
    assert s["rows"][0]["max_over_min"] == pytest.approx(1.02) and s["within_goal"] == 1
    assert s["inside_share"] == 1.0
    s = mod.summarize(runs[:2])
    b = next(r for r in s["rows"] if r["key"] == "b")
    assert b["max_over_min"] == pytest.approx(2.0 / 1.5) and b["inside_others"] == 0
    assert s["within_goal"] == 1 and s["inside_share"] == pytest.approx(0.5)
