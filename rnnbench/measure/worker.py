"""A job in its own process: `python -m rnnbench.measure.worker {measure,roof,probe} --job FILE --result FILE`.

`isolated.run_worker` writes the job (JSON) to a file and starts this module.  The worker pins
its thread count before importing any framework (`threads.pin_threads`), imports the modules
named in RNNBENCH_CELL_MODULES (`rnnbench.core.cell_modules`: users' own cells, registered at their
import, exist in this process too), runs the command on the job and writes its record (JSON)
to the result file after every phase.  The commands:

- `measure` (`measurement.measure`): one rung on one workload: first calls, timed calls alone
  or paired with a baseline, memory, parity;
- `roof` (`roof.measure_roof`): GEMM rates at the workloads' GEMM shapes;
- `probe` (`probe.probe`): for each implementation of one framework, why it cannot run here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .isolated import WORKER, write_json
from .measurement import measure
from .probe import probe
from .roof import measure_roof
from .threads import pin_threads

COMMANDS = {"measure": measure, "roof": measure_roof, "probe": probe}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {WORKER}", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--job", required=True, help="JSON file with the job")
    parser.add_argument("--result", required=True, help="where to write the result record (JSON)")
    args = parser.parse_args(argv)
    job = json.loads(Path(args.job).read_text())
    pin_threads(int(job.get("threads", 2)))  # before torch / jax are imported
    if job.get("device", "cpu") == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # don't let jax look for accelerators
    try:  # after pinning threads: a cell module may import torch or jax
        from rnnbench.core.cell_modules import import_cell_modules
        import_cell_modules()
    except Exception as e:
        write_json(args.result, {"status": "failed", "phase": "cell modules", "reason": str(e)})
        return 1
    COMMANDS[args.command](job, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
