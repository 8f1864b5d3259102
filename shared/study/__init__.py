"""The comparative study: implementation x cell x workload, measured side by side.

- `workloads`: the reference workloads (S1, S2, S3, the quick and GPU profiles, the sweeps),
  shared with the asv suites in `benchmarks/`;
- `worker`: one measurement in its own process (`python -m shared.study.worker`);
- `runner`: runs the jobs in subprocesses with a timeout and appends JSON lines;
- `cluster`: the same jobs as tasks on a Ray cluster, one per measurement slot (`--cluster`);
- `merge`: records split by the machine they ran on, answers compared across machines;
- `machine`: what the report says about this machine;
- `table`, `plots`, `report`: the table, the figures and `report.md`;
- `cli`: `rnnbench compare`, `rnnbench ladder` and `rnnbench report`.

Nothing here imports torch or jax at module import time: only the worker does, inside
its own subprocess; only `cluster`'s functions import ray.
"""
