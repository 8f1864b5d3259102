"""The comparative study: implementation x cell x workload, measured side by side.

Each measurement is made by the measurement core (`rnnbench.measure`: the workloads, the thread
settings, timing, the GEMM roof, the worker process and its isolated runner); the study plans
the measurements, keeps their records and writes the report:

- `planning`: `StudyConfig` and the measurement jobs (groups, baselines, the roof's items);
- `records`: the results file (JSON lines) and the records written into it;
- `runner`: runs the plan here, one worker process after another (`run_local_study`);
- `cluster`: the same jobs as tasks on a Ray cluster, one per measurement slot (`--cluster`);
- `stats`: ratios with an interval, paired within a process and pooled over processes;
- `merge`: records split by the machine they ran on, answers compared across machines;
- `machine`: what the report says about this machine;
- `table` (a package: the records collected, the rows, the five tables), `formatting`, `plots`,
  `report` (a package: report.md and its sections): what a run shows;
- `cli`: `rnnbench compare`, `rnnbench ladder` and `rnnbench report`.

Nothing here imports torch or jax: only the worker process does (`rnnbench.measure.worker`);
only `cluster`'s functions import ray.
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
