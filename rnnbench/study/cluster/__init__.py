"""The study on a Ray cluster: `rnnbench compare --cluster ADDRESS|auto`.

A distributed benchmark is honest only if each measurement has its resources to itself, so
the unit of scheduling is a *measurement slot*: a Ray custom resource, `rnnbench_slot`, that
each node advertises when it joins (`ray start ... --resources '{"rnnbench_slot": 1}'`): one
on a CPU node (a measurement has the node alone), one per GPU on a GPU node (the node's cores
split evenly between its slots, each measurement pinned to its share, which its record names).
Every task that measures takes one slot and runs the worker subprocess the local runner runs
(`rnnbench.measure.isolated.run_worker`): the same isolation and the same record, plus the machine
it ran on (`machine.record_machine`), the node, the slot, its cores, and its start and end times.
Its modules, one idea each:

- `node`: what runs on a node, as Ray tasks: `describe_node`, `probe_on_node`, `measure_on_node`;
- `slots`: the measurement slot (`SLOT`), the nodes that offer slots as the driver knows them
  (`Node`, `slot_nodes`), the work one slot takes (`Item`), and `ClusterError`;
- `driver`: `Driver`, the scheduler: machine classes, the probe and plan per class, each free
  slot its next measurement, records appended as tasks finish, lost tasks measured again (its
  timings, `REFRESH_S` and `DESCRIBE_TIMEOUT_S`, are read there);
- `run`: `connect` to a cluster and `run_cluster_study`, the entry point;
- `local`: `local_cluster`, several nodes on this one machine (the tests, tools/cluster_local.py).

Ray is imported only inside this package's functions: a study without --cluster never needs it.
"""

from .scheduler import Driver
from .local import local_cluster
from .run import connect, run_cluster_study
from .slots import SLOT, ClusterError, Item, Node, slot_nodes

__all__ = ["SLOT", "ClusterError", "Driver", "Item", "Node", "connect", "local_cluster", "run_cluster_study",
           "slot_nodes"]
