"""The study's records: the results file (JSON lines) and the records written into it.

A results file is append-only: every record is flushed and synced as soon as it exists
(`append_record`), so Ctrl-C or a crash of the study loses nothing, and `--resume` skips the
keys already recorded (`is_done`).  Kinds of record: "meta" (a run's settings and machine,
`meta_record`), "measurement" (one process of a measurement: the job and the worker's answer,
`measurement_record`, keyed `process_key(measurement_key(...), index)`), "roof" and
"roof_failure" (`roof_records`), "unavailable", "machine" (the cluster's classes), "end".
Records written by earlier versions read the same (`read_records`).  A `config` here is the
run's `planning.StudyConfig`.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from rnnbench.measure.isolated import FINAL_STATUSES


def append_record(path: Path, record: dict) -> None:
    """Append one JSON line and make it durable before going on."""
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


# Rungs that records made before a rename name by their earlier name.
RENAMED = {"torch.autograd": "torch.bptt"}


def _renamed(record: dict) -> dict:
    old = record.get("impl")
    if old in RENAMED:
        record["impl"] = RENAMED[old]
        if "key" in record:
            record["key"] = record["key"].replace(old + "|", RENAMED[old] + "|", 1)
    return record


def read_records(path: Path) -> list[dict]:
    """All records of a results file; a line cut short by a kill mid-write is skipped, and a rung
    recorded under an earlier name (`RENAMED`) is read under its name."""
    records = []
    if not Path(path).exists():
        return records
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(_renamed(json.loads(line)))
        except json.JSONDecodeError:
            continue
    return records


def measurement_key(impl: str, cell: str, workload: str, device: str, dtype: str) -> str:
    return f"{impl}|{cell}|{workload}|{device}|{dtype}"


def roof_key(cell: str, workload: str, device: str, when: str = "start") -> str:
    return f"roof|{cell}|{workload}|{device}|{when}"


def item_roof_key(item: dict, config, when: str) -> str:
    """The roof key of a planned roof item (`planning.roof_pairs`) in the run of `config`."""
    return roof_key(item["cell"], item["workload"]["name"], config.device, when)


PROCESS_SEP = "#p"


def process_key(key: str, index: int) -> str:
    """The record key of one process of a measurement (`key` alone for the first, as before)."""
    return key if index == 0 else f"{key}{PROCESS_SEP}{index}"


def base_key(key: str) -> str:
    return key.split(PROCESS_SEP)[0]


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def open_results(config) -> tuple[Path, list[dict]]:
    """`config.out`/results.jsonl and, with --resume, its records; an existing file is never overwritten."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    previous = read_records(results) if config.resume else []
    if results.exists() and not config.resume:
        raise FileExistsError(f"{results} exists: pass --resume to continue it or choose another --out")
    return results, previous


def is_done(record: dict, config, flagged: frozenset = frozenset()) -> bool:
    """Whether a recorded key needs no measuring again: a final status, unless --retry-failed
    and it failed, or it failed because its node was lost (the cluster runner: nothing to do
    with the rung, so --resume measures it again), or --retry-flagged and its row is one of
    `flagged` (the base keys of the rows the report flags under Sanity: `table.flagged_keys`)."""
    if not record.get("key") or record.get("status") not in FINAL_STATUSES:
        return False
    if record.get("status") == "failed" and (config.retry_failed or record.get("node_lost")):
        return False
    return not (getattr(config, "retry_flagged", False) and base_key(record["key"]) in flagged)


def meta_record(config, run_id: str, resumed: bool) -> dict:
    """The run's settings (the caller adds the machine)."""
    return dict(kind="meta", run_id=run_id, started=now(), argv=config.argv, device=config.device,
                dtype=config.dtype, threads=config.threads, repeats=config.repeats, budget_s=config.budget_s,
                min_time_s=config.min_time_s, timeout=config.timeout, resumed=resumed, processes=config.processes,
                max_processes=config.max_processes, target_half_width=config.target_half_width,
                start_method=config.started_by())


def roof_records(rec: dict, items: list[dict], threads: int, config, run_id: str, when: str) -> list[dict]:
    """The records of one roof worker's answer: a row per (cell, workload), a failure if it failed."""
    out = []
    for row in rec.get("rows", []):
        item = next(i for i in items if i["cell"] == row["cell"] and i["workload"]["name"] == row["workload"]
                    and i["threads"] == threads)
        out.append(dict(kind="roof", run_id=run_id, time=now(), device=config.device, threads=threads, status="ok",
                        roof_pass=when, key=item_roof_key(item, config, when), versions=rec.get("versions"), **row))
    if rec.get("status") != "ok":
        out.append(dict(kind="roof_failure", run_id=run_id, time=now(), reason=rec.get("reason"),
                        device=config.device, roof_pass=when))
    return out


def measurement_record(job: dict, index: int, rec: dict, run_id: str) -> dict:
    """A measurement's record: the job (less what only the worker needs) and the worker's answer."""
    record = {k: v for k, v in job.items() if k not in ("adapter_key", "adapter_path", "baseline")}
    record.update(rec)
    record.update(kind="measurement", key=process_key(job["key"], index), process=index, run_id=run_id,
                  time=now(), compile_cache="cold" if index == 0 else "warm",
                  baseline=(job.get("baseline") or {}).get("impl"))
    return record
