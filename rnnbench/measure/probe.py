"""The worker's `probe` command: which implementations of one framework run here, and on what.

The study asks here, in a worker process, so that its own process never imports a framework:
for each implementation, why it cannot run on the device (or None), and for each cell and dtype
of the study, why it cannot compute it (or None).  The study plans from the answer
(`rnnbench.study.runner.probe_availability`); each measurement still asks once more, for its own
configuration (`measurement.refusal`).
"""

from __future__ import annotations

from .isolated import write_json


def probe(job: dict, result_path: str) -> dict:
    """Why each of `job["impls"]` cannot run on `job["device"]` (`reasons`), and why it cannot
    compute each of `job["cells"]` x `job["dtypes"]` (`unsupported`, keyed "cell|dtype"); None
    where it can.  Saved after every implementation."""
    from rnnbench.core.capabilities import Capabilities
    from rnnbench.core.registry import _load_adapter
    from rnnbench.core.spec import RNNSpec

    reasons: dict[str, str | None] = {}
    unsupported: dict[str, dict[str, str | None]] = {}
    for item in job["impls"]:
        name = item["name"]
        declared = Capabilities(**item["capabilities"]) if item.get("capabilities") else None
        try:
            adapter = _load_adapter(item["adapter_path"], item["adapter_key"])
            caps = declared or adapter.capabilities
            reasons[name] = caps.device_reason(name, job["device"]) or adapter.unavailable_reason(job["device"])
            for cell in job.get("cells", ()):
                spec = RNNSpec(cell, 4, 4)
                for dtype in job.get("dtypes", ()):
                    device = job.get("device")
                    why = declared.unsupported_reason(name, spec, dtype=dtype, device=device) if declared else None
                    unsupported.setdefault(name, {})[f"{cell}|{dtype}"] = \
                        why or adapter.unsupported_reason(spec, dtype=dtype, device=device)
        except Exception as e:
            reasons[name] = f"{name}: cannot load its adapter ({type(e).__name__}: {e})"
        write_json(result_path, {"status": "running", "reasons": reasons, "unsupported": unsupported})
    rec = {"status": "ok", "reasons": reasons, "unsupported": unsupported}
    write_json(result_path, rec)
    return rec
