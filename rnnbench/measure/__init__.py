"""The measurement core: what it takes to time one rung on one workload, honestly.

Used by the study (`rnnbench.study`: it plans the measurements, keeps their records and writes
the report), by the asv suites (`benchmarks/rnn.py`) and by the framework adapters (their
GEMM rates).  Its modules, one idea each:

- `workloads`: the workloads every measurement is made on (S1, S2, S3, R1, the quick and GPU
  profiles, the sweeps) and a user's own model as a spec (`parse_spec`, `resolve`);
- `threads`: one thread count for both frameworks, set before either is imported;
- `timing`: how calls are timed (`time_calls`, `time_pairs`, `best_call_seconds`, `summarize`);
- `roof`: the GEMM roof: rates at a workload's GEMM shapes (`roof_rows`) and the roofs derived
  from them (`derive_roof`, `merge_roof`, `roof_framework`);
- `isolated`: a job in a process of its own (`run_worker`: timeout, memory limit, the record of
  a crash), and the record file both sides share (`write_json`);
- `worker`: that process, `python -m rnnbench.measure.worker {measure,roof,probe}`; its commands:
  `measurement` (one measurement: first calls, timed calls alone or paired with a baseline,
  memory; `refusal`, its one capability ask), `parity_check` (its parity column), `roof`'s
  `measure_roof`, `probe` (which implementations run here).

Nothing here imports torch or jax at module import time: the worker's commands reach a
framework through its adapter (`rnnbench.core.registry`), inside the worker process; and nothing here
imports the study, but for the study's per-process ratio estimate (`rnnbench.measure.stats`, which
imports nothing of rnnbench) that a measurement's record carries.
"""
