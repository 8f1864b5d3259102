"""A Ray cluster of several nodes on this one machine, for the tests and for measuring the
cluster runner where no second machine is at hand (tools/cluster_local.py)."""

from __future__ import annotations

import os
from contextlib import contextmanager

from .slots import SLOT, ClusterError


@contextmanager
def local_cluster(nodes: int, cores_per_node: int | None = None, slots: int = 1):
    """A Ray cluster on this machine, on the loopback address only: a head without slots and
    `nodes` nodes of `slots` measurement slots, each (with `cores_per_node`) on cores of its own.
    Yields (cluster, node handles).  For the tests, and for measuring the cluster runner on one
    large machine (tools/cluster_local.py); a real cluster is started with `ray start`."""
    from ray.cluster_utils import Cluster

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cores_per_node and nodes * cores_per_node > len(cores):
        raise ClusterError(f"{nodes} nodes of {cores_per_node} cores need {nodes * cores_per_node}; "
                           f"this process may use {len(cores)}")
    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # then Ray binds every node to 127.0.0.1
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
    handles = []
    try:
        for i in range(nodes):
            if cores_per_node:  # a node's raylet and its workers inherit the affinity they start with
                os.sched_setaffinity(0, cores[i * cores_per_node:(i + 1) * cores_per_node])
            try:
                handles.append(cluster.add_node(num_cpus=cores_per_node or 1, resources={SLOT: slots}))
            finally:
                if cores_per_node:
                    os.sched_setaffinity(0, cores)
        cluster.wait_for_nodes()
        yield cluster, handles
    finally:
        cluster.shutdown()
        if saved is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved
