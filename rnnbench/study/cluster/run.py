"""The entry point, `run_cluster_study`: connect to the cluster at the study's address, run the
driver there, disconnect."""

from __future__ import annotations

import socket
from pathlib import Path

from ..planning import StudyConfig, study_names
from ..records import open_results
from .scheduler import Driver
from .slots import SLOT, ClusterError


def connect(address: str):
    """`ray.init` on an existing cluster, quietly; a clear ClusterError when there is none."""
    import logging

    import ray

    try:
        host, _, port = address.rpartition(":")
        if host and port.isdigit() and "://" not in address:  # Ray would retry a dead address for minutes
            socket.create_connection((host, int(port)), timeout=10).close()
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                 configure_logging=True)
    except (OSError, RuntimeError, ValueError) as e:  # ConnectionError is an OSError
        raise ClusterError(f"cannot reach a Ray cluster at {address!r}: {str(e).rstrip('.')}. Start one first: "
                           f"`ray start --head --resources '{{\"{SLOT}\": 1}}'` on one machine and "
                           f"`ray start --address=HEAD:6379 --resources '{{\"{SLOT}\": 1}}'` on the others "
                           "(docs/cluster.md)") from None
    return ray


def run_cluster_study(config: StudyConfig, *, progress: bool = True, log=print) -> Path:
    """`rnnbench.study.run_study` on the Ray cluster at `config.cluster`; returns results.jsonl's path."""
    results, previous = open_results(config)
    names = study_names(config)
    ray = connect(config.cluster)
    try:
        return Driver(config, results, previous, names, log, progress).run()
    finally:
        ray.shutdown()
