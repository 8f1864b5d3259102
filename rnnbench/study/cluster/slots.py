"""The unit of scheduling: the measurement slot.

`SLOT` is the Ray custom resource each node advertises when it joins, one per measurement it may
run at a time; `slot_nodes` reads which live nodes offer slots, `Node` is what the driver knows
of one (its machine, its busy slots, the cores of each slot), and `Item` is the work one slot
takes.  `ClusterError` is raised when the cluster cannot run the study at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..records import process_key

SLOT = "rnnbench_slot"


class ClusterError(RuntimeError):
    """The cluster cannot run the study (unreachable, no slots); the message says what to do."""


@dataclass
class Node:
    node_id: str
    host: str
    slots: int
    info: dict = field(default_factory=dict)
    machine_class: str | None = None
    busy: set = field(default_factory=set)
    alive: bool = True

    def free_slot(self) -> int | None:
        return next((s for s in range(self.slots) if s not in self.busy), None) if self.alive else None

    def slot_cpus(self, slot: int) -> list[int] | None:
        """The cores of one slot: the node's usable cores split evenly between its slots (None with
        one slot: the worker pins its threads itself, as it does locally)."""
        cores = self.info.get("cpu_list") or []
        if self.slots <= 1 or len(cores) < self.slots:
            return None
        k = len(cores) // self.slots
        return cores[slot * k:(slot + 1) * k]

    @property
    def name(self) -> str:
        return f"{self.host} ({self.node_id[:8]})"


@dataclass
class Item:
    """A unit of work for one slot: a measurement process or a roof pass of one machine class."""
    cls: str
    kind: str  # "measure" or "roof"
    job: dict
    index: int = 0  # measurement: the process number
    when: str = ""  # roof: "start" or "end"
    items: list = field(default_factory=list)  # roof: the (cell, workload, threads) it covers
    attempt: int = 0
    avoid: set = field(default_factory=set)
    lost: list = field(default_factory=list)  # why earlier attempts were lost
    unschedulable: int = 0

    @property
    def key(self) -> str:
        return process_key(self.job["key"], self.index) if self.kind == "measure" else f"roof|{self.when}"


def slot_nodes(ray) -> dict[str, tuple[str, int]]:
    """node id -> (host, slots) of every live node that advertises measurement slots."""
    out = {}
    for n in ray.nodes():
        slots = int(n.get("Resources", {}).get(SLOT, 0))
        if n.get("Alive") and slots > 0:
            out[n["NodeID"]] = (n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "?", slots)
    return out
