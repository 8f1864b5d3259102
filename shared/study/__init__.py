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


def run_study(config, *, progress: bool = True, log=print):
    """Run (or resume) the study of `config` (a `runner.StudyConfig`) into `config.out`; return the path
    of results.jsonl.  With `config.cluster` the measurements run as tasks on that Ray cluster
    (`cluster.run_cluster_study`), otherwise here, one subprocess after another
    (`runner.run_local_study`, which never imports ray)."""
    if config.cluster:
        from .cluster import run_cluster_study

        return run_cluster_study(config, progress=progress, log=log)
    from .runner import run_local_study

    return run_local_study(config, progress=progress, log=log)
