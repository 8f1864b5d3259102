"""The GEMM roof: the best rates the GEMM libraries reach at a workload's GEMM shapes.

A rung's time is judged against the time its FLOPs would take at the best GEMM rate measured at
its workload's shapes (`derive_roof`): the recurrent step GEMM (B x H) x (H x G*H) and the input
projection over all steps (T*B x I) x (I x G*H), with each framework's GEMM libraries (torch's
`mm` and oneDNN, XLA's dot; each framework adapter's `gemm_gflops`, timed by
`timing.best_call_seconds`) and, at the step shape, each framework's chain of T dependent step
GEMMs in one compiled loop.

- `roof_rows`: the rates of each (cell, workload), one row each (the study's `roof` records,
  asv's `RoofFraction`); `measure_roof`: the worker's `roof` command around it;
- `merge_roof`: two measurements of one row (the start and the end of a run);
- `derive_roof`: the roofs of a row (`ROOF_LIBS`: torch's, XLA's, the machine's);
  `roof_framework`: whose roof judges a rung.
"""

from __future__ import annotations

from .isolated import write_json
from .timing import best_call_seconds
from .workloads import Workload

# The GEMM libraries whose rates make each roof: a framework's own (torch: mm, oneDNN and its
# chained loop; XLA: its dot and chained loop) and the machine's, every library of both.
ROOF_LIBS = {"torch": ("mm", "onednn", "chain_torch"),
             "xla": ("xla", "chain_xla"),
             "machine": ("mm", "onednn", "chain_torch", "xla", "chain_xla")}


def merge_roof(old: dict | None, new: dict) -> dict:
    """Two measurements of one roof row (start and end of a run): each rate the better of
    the two (a rate is a lower bound of what the library can do), and `roof_drift` the
    largest relative change of a rate between them (the machine's state changed)."""
    if old is None:
        return dict(new, roof_passes=1, roof_drift=0.0)
    merged = dict(old, roof_passes=old.get("roof_passes", 1) + 1)
    for k, v in new.items():
        if k.endswith("_gflops") and isinstance(v, (int, float)):
            prev = old.get(k)
            if isinstance(prev, (int, float)) and prev > 0 and v > 0:
                merged["roof_drift"] = max(merged.get("roof_drift", 0.0), max(v, prev) / min(v, prev) - 1)
            merged[k] = max(v, prev) if isinstance(prev, (int, float)) else v
    return merged


def derive_roof(row: dict) -> dict:
    """The roofs of one (cell, workload): the best GEMM rate any of its GEMM shapes reached
    with the libraries of each roof (`ROOF_LIBS`): no FLOP of any rung, forward or backward,
    can run faster than that, so every rung is at or below 100% of it.

    A tighter estimate (the recurrent FLOPs at the step shape's rate, the rest at the input
    projection's) is beaten by a fused RNN kernel (oneDNN's, behind nn.LSTM; docs/study.md):
    it is not a roof.  The step and input rates stay in the row, which is what shows a
    workload latency-bound."""
    out = dict(row)
    for roof, libs in ROOF_LIBS.items():
        rates = {f"{part} {lib}": row.get(f"{part}_{lib}_gflops") for part in ("step", "input") for lib in libs}
        rates = {k: v for k, v in rates.items() if v}
        best = max(rates, key=rates.get) if rates else None
        out[f"roof_{roof}_gflops"] = rates[best] if best else None
        out[f"roof_{roof}_from"] = best
    return out


def roof_framework(framework: str | None) -> str:
    """Whose GEMM library a rung is judged against: XLA for JAX rungs, torch's otherwise."""
    return "xla" if framework == "jax" else "torch"


def roof_rows(items: list[dict], device: str, min_time: float = 0.1, frameworks=("torch", "jax"), on_row=None):
    """GEMM rates of each item's (cell, workload) shapes with the GEMM libraries of
    `frameworks` (those installed); one row per item, with what `derive_roof` needs.
    Libraries: torch's `mm` and oneDNN, XLA's dot; at the step shape also each framework's
    "chain" (T dependent step GEMMs in one compiled loop, no per-call dispatch)."""
    from rnnbench.core.registry import framework

    fws = {name: framework(name) for name in frameworks}

    def gemm_gflops(m, k, n, steps):
        out = {}
        if "torch" in fws:
            rates = fws["torch"].gemm_gflops(m, k, n, timer=best_call_seconds, device=device, min_time=min_time,
                                             steps=steps)
            out.update(mm=rates["torch.mm"], onednn=rates["onednn"])
            if steps:
                out["chain_torch"] = rates["chain"]
        if "jax" in fws:
            rates = fws["jax"].gemm_gflops(m, k, n, timer=best_call_seconds, device=device, min_time=min_time,
                                           steps=steps)
            out["xla"] = rates["xla"]
            if steps:
                out["chain_xla"] = rates["chain"]
        return out

    cache: dict[tuple, dict] = {}
    rows = []
    for item in items:
        wl, cell = Workload.from_dict(item["workload"]), item["cell"]
        shapes = {"step": (*wl.step_gemm(cell), wl.seq_len), "input": (*wl.input_gemm(cell), None)}
        row = {"cell": cell, "workload": wl.name, "step_shape": list(shapes["step"][:3]),
               "input_shape": list(shapes["input"][:3]), "seq_len": wl.seq_len, "flops_forward": wl.flops(cell)}
        for part, shape in shapes.items():
            if shape not in cache:
                cache[shape] = gemm_gflops(*shape)
            for lib, g in cache[shape].items():
                row[f"{part}_{lib}_gflops"] = g
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def measure_roof(job: dict, result_path: str) -> dict:
    """The worker's `roof` command: for each (cell, workload) of the job, GEMM GFLOP/s at its
    step and input shapes, per library (`roof_rows`), saved after every row.  The roofs are
    derived from these rates when the report is made (`derive_roof`), so that a roof measured
    again at the end of the run can raise them."""
    from rnnbench.core.registry import framework

    torch_fw = framework("torch")
    torch_fw.set_threads(job["threads"])
    rec = {"status": "running", "versions": torch_fw.versions(), "rows": []}
    frameworks = ["torch"]
    try:
        jax_fw = framework("jax")
        jax_fw.set_threads(job["threads"])
        rec["versions"].update(jax_fw.versions())
        frameworks.append("jax")
    except ImportError as e:  # a torch-only install: no XLA roof, said in the record
        rec["xla_roof"] = f"no XLA roof: {e}"
    write_json(result_path, rec)

    def on_row(row):
        rec["rows"].append(row)
        write_json(result_path, rec)

    roof_rows(job["items"], job["device"], job.get("min_time", 0.1), frameworks, on_row)
    rec["status"] = "ok"
    rec["torch_threads"] = job["threads"]
    write_json(result_path, rec)
    return rec
