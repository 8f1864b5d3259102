"""The table's rows: one per measurement, with the derived columns.

`table_rows` turns each pooled measurement of `Results` into a row: times in ms, its ratio to
`torch.native` (float32 nn.LSTM / nn.GRU of the same cell, or of its family for a custom cell)
with its interval, GFLOP/s and fractions of the GEMM roof (the machine's, and its own
framework's, `rnnbench.measure.roof.roof_framework`), memory, first calls, parity, and the
`sanity_flags` that make a row's figures impossible or suspect.  Every ratio is taken between
two measurements of the same results file, cell, workload, device and dtype: measured side by
side, which is what holds on a shared, noisy machine.
"""

from __future__ import annotations

from rnnbench.core.catalogue import family_of as plain_family  # the plain cell a catalogue cell is compared with
from rnnbench.measure.roof import roof_framework
from ..records import measurement_key
from .results import Results, collect

NATIVE = "torch.native"


def ratio_or_none(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def _x_native(m: dict, native: dict | None, phase: str):
    """A row's time over torch.native's: the pooled paired ratio when the row was measured in
    pairs with float32 native (every float32 row of a study since intervals), else the ratio of
    the two medians (older records)."""
    if m.get(f"{phase}_ratio") is not None and m.get("dtype") == "float32":
        return m[f"{phase}_ratio"]
    return ratio_or_none(m.get(f"{phase}_s"), native and native.get(f"{phase}_s"))


NOISY_IQR = 1 / 3  # an IQR wider than this fraction of the median is noise, not a result
# The baseline's upper over lower quartile across a run's processes (`results.baseline_spreads`)
# above which its ratios are read within the run only: between what a baseline that holds still
# and one in two states show in the committed runs (docs/study.md, "Reproducibility").
UNSTABLE_BASELINE = 1.25


def sanity_flags(row: dict) -> list[str]:
    """What makes a row's figures impossible or suspect (empty: it reads as a result).

    A roof fraction above 100% is impossible (the roof bounds every rung); a forward slower
    than its own forward+backward is suspect; an IQR wider than a third of the median is
    noise (the machine was busy)."""
    flags = []
    for phase in ("forward", "train"):
        frac = row.get(f"roof_fraction_{phase}")
        if frac is not None and frac > 1.0:
            flags.append(f"roof {phase} {100 * frac:.1f}% > 100%")
    if row.get("forward_ms") and row.get("train_ms") and row["forward_ms"] > row["train_ms"]:
        flags.append("forward slower than forward+backward")
    for phase in ("forward", "train"):
        median, iqr = row.get(f"{phase}_ms"), row.get(f"{phase}_iqr_ms")
        if median and iqr is not None and iqr > NOISY_IQR * median:
            flags.append(f"{phase} IQR {iqr / median:.0%} of the median")
    return flags


def table_rows(res: Results) -> list[dict]:
    """One row per measurement with the derived columns."""
    rows = []
    for m in res.measurements:
        native = res.find(NATIVE, m["cell"], m["workload_name"], m["device"], m["dtype"])
        if native is None or native.get("status") == "skipped":
            # a custom cell has no native kernel (its torch.native row, if planned, is "skipped"):
            # compare with its family's plain cell, nn.LSTM or nn.GRU
            native = res.find(NATIVE, plain_family(m["cell"]), m["workload_name"], m["device"], m["dtype"])
        roof = res.roofs.get((m["cell"], m["workload_name"], m["device"]))
        if roof and roof.get("dtype", "float32") != m["dtype"]:
            roof = None  # the roof's GEMMs ran in float32: it says nothing of a bf16 row
        own = roof_framework(m.get("framework"))  # its own framework's GEMM libraries
        roof_g = roof.get("roof_machine_gflops") if roof else None
        own_g = roof.get(f"roof_{own}_gflops") if roof else None
        rows.append(dict(
            impl=m["impl"], framework=m.get("framework"), rung=m.get("rung"), group=m.get("group", "main"),
            cell=m["cell"], workload=m["workload_name"], device=m["device"], dtype=m["dtype"],
            status=m.get("status"), reason=m.get("reason"),
            forward_ms=to_ms(m.get("forward_s")), forward_iqr_ms=to_ms(m.get("forward_iqr_s")),
            train_ms=to_ms(m.get("train_s")), train_iqr_ms=to_ms(m.get("train_iqr_s")),
            forward_x_native=_x_native(m, native, "forward"), train_x_native=_x_native(m, native, "train"),
            **{f"{phase}_{k}": m.get(f"{phase}_{k}") for phase in ("forward", "train")
               for k in ("ratio", "ratio_lo", "ratio_hi", "processes", "pairs_n", "tight", "process_spread")},
            **{f"{phase}_baseline_spread": (res.baselines.get((plain_family(m["cell"]), m["workload_name"], m["device"],
                                                               phase)) or {}).get("spread")
               for phase in ("forward", "train")},
            net_rss_mib=to_mib(m.get("net_rss_bytes")),
            first_forward_warm_s=m.get("first_forward_warm_s"), first_train_warm_s=m.get("first_train_warm_s"),
            kernel_choices=m.get("kernel_choices"),
            gflops_forward=m.get("gflops_forward"), gflops_train=m.get("gflops_train"),
            roof_gflops=roof_g,
            roof_fraction_forward=ratio_or_none(m.get("gflops_forward"), roof_g),
            roof_fraction_train=ratio_or_none(m.get("gflops_train"), roof_g),
            own_roof_fraction_train=ratio_or_none(m.get("gflops_train"), own_g),
            peak_rss_mib=to_mib(m.get("peak_rss_bytes")), peak_device_mib=to_mib(m.get("peak_device_bytes")),
            first_forward_s=m.get("first_forward_s"), first_train_s=m.get("first_train_s"),
            parity_max_error=parity_of(res, m["impl"], m["cell"], m["dtype"]),
            parity_ok=parity_ok_of(res, m["impl"], m["cell"], m["dtype"]),
            parity_bound_ratio=parity_ratio_of(res, m["impl"], m["cell"], m["dtype"]),
            kernel_isa=m.get("kernel_isa"),
            forward_n=m.get("forward_n"), train_n=m.get("train_n"), threads=m.get("threads"),
        ))
        flags = sanity_flags(rows[-1])
        rows[-1]["flags"] = "; ".join(flags)
        # a roof above 100% impeaches the roof, not the time; the other flags impeach the time
        rows[-1]["time_suspect"] = any(not f.startswith("roof") for f in flags)
    return rows


def _parity_field(res: Results, impl: str, cell: str, dtype: str | None, key: str):
    for m in reversed(res.measurements):
        if m["impl"] == impl and m["cell"] == cell and dtype in (None, m["dtype"]) and m.get(key) is not None:
            return m[key]
    return None


def parity_of(res: Results, impl: str, cell: str, dtype: str | None = None):
    """The parity error of impl on cell (measured once per impl, cell and dtype), or None."""
    return _parity_field(res, impl, cell, dtype, "parity_max_error")


def parity_ok_of(res: Results, impl: str, cell: str, dtype: str | None = None):
    return _parity_field(res, impl, cell, dtype, "parity_ok")


def parity_ratio_of(res: Results, impl: str, cell: str, dtype: str | None = None):
    """The largest error / bound of the tolerance rule (<= 1 passes)."""
    return _parity_field(res, impl, cell, dtype, "parity_bound_ratio")


def parity_note(res: Results, impl: str, cell: str) -> str | None:
    for m in reversed(res.measurements):
        if m["impl"] == impl and m["cell"] == cell and m.get("parity_source"):
            return m["parity_source"]
    return None


def to_ms(s):
    return None if s is None else 1e3 * s


def to_mib(b):
    return None if b is None else b / 2**20


def flagged_keys(records: list[dict]) -> frozenset:
    """The base keys of the measurements whose rows are flagged under Sanity (noise, a forward slower
    than its forward+backward, an impossible roof fraction): what --retry-flagged measures again."""
    return frozenset(measurement_key(r["impl"], r["cell"], r["workload"], r["device"], r["dtype"])
                     for r in table_rows(collect(records)) if r.get("flags"))
