"""The driver: the process that runs the study on the cluster and schedules it.

It asks every node what machine it is (a task on the node), groups nodes into machine classes
(`machine.machine_class`), probes the implementations once per class, plans the study per
class, and gives each free slot the next measurement of its node's class, pinned to that node.
Records come back as tasks finish and are appended to results.jsonl at once: an interrupted
driver loses nothing and `--resume` goes on.  A task lost with its node (or its Ray worker) is
measured again once on another node of the same class, then recorded as failed with both
reasons and `node_lost` (which `--resume` measures again).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import deque
from pathlib import Path

from rnnbench.measure.isolated import FINAL_STATUSES
from ..planning import StudyConfig, plan, probe_items, roof_job, roof_pairs, roof_timeout
from ..records import (
    append_record, base_key, is_done, measurement_record, meta_record, now, process_key, roof_key, roof_records)
from ..runner import progress_bar
from .node import describe_node, measure_on_node, probe_on_node
from .slots import SLOT, ClusterError, Item, Node, slot_nodes

REFRESH_S = 5.0  # how often the driver looks for nodes that died or joined
DESCRIBE_TIMEOUT_S = 300.0
# Environment the driver hands to every measurement: the study's own switches (RNNBENCH_CELL_MODULES,
# RNNBENCH_XLA, RNNBENCH_GEMM, ...), which a node's Ray workers do not inherit from the driver.
FORWARD_PREFIX = "RNNBENCH_"


class Driver:
    """The scheduler.  `ray`: the Ray module, or a stand-in with its API (tools/experiments/cluster_simulate.py
    replays a recorded run's task durations through this same scheduler)."""

    def __init__(self, config: StudyConfig, results: Path, previous: list[dict], names: list[str], log, progress,
                 ray=None):
        if ray is None:
            import ray

        self.ray, self.config, self.results, self.log, self.progress = ray, config, results, log, progress
        self.names = names
        self.run_id = uuid.uuid4().hex[:8]
        # one compile-cache folder per study on each node, kept across --resume
        first_meta = next((r for r in previous if r.get("kind") == "meta"), None)
        self.study = (first_meta or {}).get("run_id", self.run_id)
        self.previous = previous
        self.nodes: dict[str, Node] = {}
        self.classes: dict[str, dict] = {}  # class -> machine info (its first node's)
        self.queue: dict[str, deque[Item]] = {}
        self.inflight: dict = {}  # ObjectRef -> (item, node, slot)
        self.describing: dict = {}  # ObjectRef -> Node (nodes that joined during the run)
        self.done: set[tuple[str, str]] = set()  # (class, record key) recorded in a final state
        self.finished: set[tuple[str, str]] = set()  # (class, record key) recorded at all (lost ones too)
        self.stopped: set[tuple[str, str]] = set()  # (class, measurement key): no more processes
        self.ok: dict[tuple[str, str], list[dict]] = {}  # (class, measurement key) -> ok records
        self.ran_on: dict[tuple[str, str], set[str]] = {}  # (class, measurement key) -> nodes it ran on
        self.end_roof: dict[str, list[dict]] = {}
        self.plans: dict[str, list[dict]] = {}
        self.unsupported: dict[str, dict] = {}
        self.env = {k: v for k, v in os.environ.items() if k.startswith(FORWARD_PREFIX)}
        for r in previous:
            if r.get("machine_class") and is_done(r, config):
                self.done.add((r["machine_class"], r["key"]))
                if r.get("kind") == "measurement":
                    k = base_key(r["key"])
                    if r.get("status") == "ok":
                        self.ok.setdefault((r["machine_class"], k), []).append(r)
                    if r.get("status") == "skipped" or (r.get("process", 0) == 0 and r.get("status") == "failed"):
                        self.stopped.add((r["machine_class"], k))
        self.finished |= self.done

    # -- submitting ------------------------------------------------------------------------
    def _submit(self, fn, node: Node, *args, gpu: bool = False):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = self.ray.remote(fn).options(
            resources={SLOT: 1}, num_cpus=0, num_gpus=1 if gpu else 0, max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
        return remote.remote(*args)

    def _options(self, node: Node, slot: int) -> dict:
        return dict(timeout=self.config.timeout, max_memory_gb=self.config.max_memory_gb, slots=node.slots,
                    cpus=node.slot_cpus(slot), env=self.env, study=self.study)

    # -- nodes -----------------------------------------------------------------------------
    def discover(self) -> None:
        found = slot_nodes(self.ray)
        if not found:
            raise ClusterError(f"no live node of the cluster advertises the {SLOT!r} resource: start each node with "
                               f"`ray start ... --resources '{{\"{SLOT}\": 1}}'` (one per GPU on a GPU node; "
                               "docs/cluster.md)")
        refs = {}
        for node_id, (host, slots) in found.items():
            node = self.nodes[node_id] = Node(node_id, host, slots)
            refs[self._submit(describe_node, node, self.config.device, self.config.threads)] = node
        ready, pending = self.ray.wait(list(refs), num_returns=len(refs), timeout=DESCRIBE_TIMEOUT_S)
        for ref in pending:
            refs[ref].alive = False
            self.log(f"node {refs[ref].name} did not answer in {DESCRIBE_TIMEOUT_S:g} s: not used")
        for ref in ready:
            node = refs[ref]
            if self._described(node, ref):
                self.classes.setdefault(node.machine_class, node.info)
        if not any(n.alive for n in self.nodes.values()):
            raise ClusterError("no node of the cluster could describe itself (see the log lines above)")

    def _described(self, node: Node, ref) -> bool:
        """Read a node's answer to `describe_node`: its machine and class (False: it failed)."""
        from ..machine import machine_class

        try:
            node.info = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            node.alive = False
            self.log(f"node {node.name} failed to describe itself: {_first_line(e)}")
            return False
        node.machine_class = machine_class(node.info)
        if node.slots > 1 and node.slot_cpus(0) and self.config.threads > len(node.slot_cpus(0)):
            self.log(f"node {node.name}: {self.config.threads} threads per measurement but only "
                     f"{len(node.slot_cpus(0))} cores per slot ({node.slots} slots share {len(node.info['cpu_list'])})")
        return True

    def refresh(self) -> None:
        """Mark nodes that died; describe nodes that joined (they take work of a class already planned)."""
        alive = slot_nodes(self.ray)
        for node in self.nodes.values():
            if node.alive and node.node_id not in alive:
                node.alive = False
                self.log(f"node {node.name} left the cluster")
        for node_id, (host, slots) in alive.items():
            if node_id not in self.nodes:
                node = self.nodes[node_id] = Node(node_id, host, slots)
                self.describing[self._submit(describe_node, node, self.config.device, self.config.threads)] = node

    def _joined(self, ref) -> None:
        node = self.describing.pop(ref)
        if not self._described(node, ref):
            return
        if node.machine_class not in self.plans:
            node.alive = False
            self.log(f"node {node.name} joined with a machine not planned in this run: not used "
                     "(`--resume` plans it)")
        else:
            self.log(f"node {node.name} joined: it takes measurements of its machine class")

    def class_nodes(self, cls: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.alive and n.machine_class == cls]

    # -- the plan --------------------------------------------------------------------------
    def write_meta(self) -> None:
        from ..machine import machine_info, machine_label, record_machine

        nodes = [dict(node_id=n.node_id, host=n.host, slots=n.slots, machine_class=n.machine_class,
                      cores=n.info.get("cpu_list")) for n in self.nodes.values() if n.alive]
        append_record(self.results, dict(
            meta_record(self.config, self.run_id, bool(self.previous)),
            cluster=dict(address=self.config.cluster, nodes=nodes,
                         classes={c: machine_label(i) for c, i in self.classes.items()}),
            driver=record_machine(machine_info("cpu"))))
        for cls, info in self.classes.items():
            append_record(self.results, dict(kind="machine", run_id=self.run_id, machine_class=cls,
                                             label=machine_label(info),
                                             machine={k: v for k, v in info.items() if k != "cpu_list"},
                                             nodes=[n["node_id"] for n in nodes if n["machine_class"] == cls]))

    def probe_and_plan(self) -> None:
        """Probe the implementations on one node of each class (all classes at once), then plan each."""
        config = self.config
        planned = plan(config, self.names)
        cells, dtypes = sorted({j["cell"] for j in planned}), sorted({j["dtype"] for j in planned})
        items = probe_items(self.names)
        tried = {cls: [] for cls in self.classes}
        pending: dict = {}
        answers: dict[str, tuple] = {}

        def probe(cls) -> None:  # on a node of the class not tried yet (one answer per class)
            node = next((n for n in self.class_nodes(cls) if n.node_id not in tried[cls]), None)
            if node is not None:
                tried[cls].append(node.node_id)
                pending[self._submit(probe_on_node, node, items, config.device, max(config.timeout, 120), cells,
                                     dtypes, gpu=config.device == "cuda")] = cls

        for cls in self.classes:
            probe(cls)
        while pending:
            ready, _ = self.ray.wait(list(pending), num_returns=1)
            cls = pending.pop(ready[0])
            try:
                answers[cls] = self.ray.get(ready[0])
            except self.ray.exceptions.RayError as e:
                self.log(f"probing machine {cls} failed on node {tried[cls][-1][:8]}: {_first_line(e)}")
                probe(cls)
        for cls in list(self.classes):
            if cls not in answers:
                self.log(f"machine {cls}: no node could probe the implementations: its measurements are not run")
                continue
            reasons, unsupported = answers[cls]
            for n in self.names:
                if reasons.get(n) is not None:
                    append_record(self.results, dict(kind="unavailable", run_id=self.run_id, impl=n,
                                                     device=config.device, reason=reasons[n], machine_class=cls))
            self.plans[cls] = plan(config, [n for n in self.names if reasons.get(n) is None])
            self.unsupported[cls] = unsupported
            self._enqueue_plan(cls)

    def _enqueue_plan(self, cls: str) -> None:
        config, queue = self.config, self.queue.setdefault(cls, deque())
        planned = self.plans[cls]
        jobs = [(j, i) for i in range(config.processes) for j in planned
                if (cls, process_key(j["key"], i)) not in self.done]
        pairs = roof_pairs(config, planned)
        start = [p for p in pairs if (cls, roof_key(p["cell"], p["workload"]["name"], config.device, "start"))
                 not in self.done]
        self.end_roof[cls] = [p for p in pairs if jobs or (cls, roof_key(p["cell"], p["workload"]["name"],
                                                                          config.device, "end")) not in self.done]
        for threads in sorted({p["threads"] for p in start}):
            queue.append(Item(cls, "roof", roof_job(config, start, threads), when="start", items=start))
        for job, index in jobs:
            reason = self.unsupported[cls].get((job["impl"], job["cell"], job["dtype"]))
            if reason and index == 0:  # known without running anything: recorded now, as the local runner does
                self._record(Item(cls, "measure", job, 0), {"status": "skipped", "reason": reason, "wall_s": 0.0},
                             None, None)
            elif not reason:
                queue.append(Item(cls, "measure", job, index))
        self.log(f"machine {cls} ({len(self.class_nodes(cls))} node(s), "
                 f"{sum(n.slots for n in self.class_nodes(cls))} slot(s)): {len(planned)} measurements x "
                 f"{config.processes} processes, {len(queue)} tasks to run")

    # -- the loop --------------------------------------------------------------------------
    def _eligible(self, item: Item) -> bool:
        """Process k of a measurement waits for process k-1 (a rung that fails in its first
        process is not measured again, as in the local runner)."""
        if item.kind != "measure":
            return True
        key = (item.cls, item.job["key"])
        if key in self.stopped:
            return True  # dropped when dispatched
        return item.index == 0 or (item.cls, process_key(item.job["key"], item.index - 1)) in self.finished

    def _pick_node(self, item: Item) -> tuple[Node, int] | None:
        nodes = [n for n in self.class_nodes(item.cls) if n.free_slot() is not None]
        others = [n for n in nodes if n.node_id not in item.avoid]
        if item.avoid and not others and any(n.node_id not in item.avoid for n in self.class_nodes(item.cls)):
            return None  # another node of the class exists but is busy: wait for it
        nodes = others or nodes  # the lost node itself only when it is the class's last (and still alive)
        if not nodes:
            return None
        node = max(nodes, key=lambda n: n.slots - len(n.busy))
        return node, node.free_slot()

    def dispatch(self) -> None:
        for cls, queue in self.queue.items():
            while queue:
                item = next((i for i in queue if self._eligible(i)), None)
                if item is None:
                    break
                if item.kind == "measure" and (cls, item.job["key"]) in self.stopped:
                    queue.remove(item)
                    self.bar.advance(self.task)
                    continue
                picked = self._pick_node(item)
                if picked is None:
                    break
                queue.remove(item)
                node, slot = picked
                node.busy.add(slot)
                if item.kind == "measure":
                    job = dict(item.job, parity=item.job["parity"] and item.index == 0)
                    ref = self._submit(measure_on_node, node, "measure", job, self._options(node, slot),
                                       gpu=self.config.device == "cuda")
                else:
                    options = dict(self._options(node, slot), timeout=roof_timeout(self.config, item.job))
                    ref = self._submit(measure_on_node, node, "roof", item.job, options,
                                       gpu=self.config.device == "cuda")
                self.inflight[ref] = (item, node, slot)
        self._maybe_end_roof()

    def _maybe_end_roof(self) -> None:
        """A class's end roof once its measurements are all done (measured again: each rate the better)."""
        for cls, pairs in self.end_roof.items():
            if not pairs or any(i.kind == "measure" for i in self.queue.get(cls, ())) or any(
                    it.cls == cls and it.kind == "measure" for it, _, _ in self.inflight.values()):
                continue
            for threads in sorted({p["threads"] for p in pairs}):
                self.queue[cls].append(Item(cls, "roof", roof_job(self.config, pairs, threads), when="end",
                                            items=pairs))
                self._grow(1)
            self.end_roof[cls] = []

    def _grow(self, n: int) -> None:
        self.total += n
        self.bar.update(self.task, total=self.total)

    def collect(self, ref) -> None:
        if ref in self.describing:
            self._joined(ref)
            return
        item, node, slot = self.inflight.pop(ref)
        node.busy.discard(slot)
        try:
            rec = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:  # our code raised on the node: not the node's fault
            rec = {"status": "failed", "reason": f"the task raised on node {node.name}: {_first_line(e)}"}
        except self.ray.exceptions.RayError as e:
            self._lost(item, node, e)
            return
        self._record(item, rec, node, slot)
        self.bar.advance(self.task)

    def _lost(self, item: Item, node: Node, error) -> None:
        ray = self.ray
        if isinstance(error, ray.exceptions.NodeDiedError) or node.node_id not in slot_nodes(ray):
            node.alive = False
        reason = f"lost on node {node.name}: {type(error).__name__}: {_first_line(error)}"
        queue = self.queue[item.cls]
        if isinstance(error, ray.exceptions.TaskUnschedulableError) and item.unschedulable < 3:
            item.unschedulable += 1  # it never started: placed again, not an attempt
            item.avoid.add(node.node_id)
            queue.appendleft(item)
            return
        if item.attempt == 0:
            self.log(f"  {_describe(item)}: {reason}; measuring it again on another node of its machine")
            item.attempt, item.lost = 1, [reason]
            item.avoid.add(node.node_id)
            queue.appendleft(item)
            return
        why = f"{'; then '.join(item.lost + [reason])} (measured twice, lost both times)"
        self.log(f"  {_describe(item)}: FAILED: {why}")
        self._record(item, {"status": "failed", "reason": why, "node_lost": True}, node, None)
        self.bar.advance(self.task)

    def _record(self, item: Item, rec: dict, node: Node | None, slot: int | None) -> None:
        from ..machine import record_machine

        cls = item.cls
        placement = {}
        if node is not None:
            placement = dict(machine=record_machine(node.info), node_id=node.node_id, host=node.host, slot=slot,
                             cpus=node.slot_cpus(slot) if slot is not None else None, attempt=item.attempt)
            if item.lost:
                placement["retried_after"] = list(item.lost)
        if item.kind == "roof":
            threads = item.job["threads"]
            for record in roof_records(rec, item.items, threads, self.config, self.run_id, item.when):
                append_record(self.results, dict(record, machine_class=cls, **placement))
                self.done.add((cls, record.get("key", "")))
            return
        job, index = item.job, item.index
        record = measurement_record(job, index, rec, self.run_id)
        key = (cls, job["key"])
        ran_before = node is not None and node.node_id in self.ran_on.get(key, set())
        record.update(machine_class=cls, **placement)
        if node is not None:
            # warm only where an earlier process of this measurement compiled on the same node
            record["compile_cache"] = "warm" if ran_before else "cold"
            self.ran_on.setdefault(key, set()).add(node.node_id)
        append_record(self.results, record)
        self.finished.add((cls, record["key"]))
        status = rec.get("status")
        if status in FINAL_STATUSES and not rec.get("node_lost"):
            self.done.add((cls, record["key"]))
        if status == "failed" and not rec.get("node_lost"):
            self.log(f"  {job['impl']} {job['cell']} {job['workload_name']}: FAILED: {rec.get('reason')}")
        if status == "skipped" or (index == 0 and status == "failed"):
            self.stopped.add(key)
        if status == "ok":
            self.ok.setdefault(key, []).append(record)
        # more processes while the interval is wider than the target
        if (status in FINAL_STATUSES and key not in self.stopped and index + 1 >= self.config.processes
                and index + 1 < self.config.max_processes and not self._tight(key)):
            self.queue[cls].append(Item(cls, "measure", job, index + 1))
            self._grow(1)

    def _tight(self, key) -> bool:
        from rnnbench.measure.stats import is_tight, pooled_ratio

        recs = self.ok.get(key, [])
        for phase in ("forward", "train"):
            processes = [r[f"{phase}_pairs"] for r in recs if r.get(f"{phase}_pairs")]
            if processes and not is_tight(pooled_ratio(processes), self.config.target_half_width):
                return False
        return True

    def run(self) -> Path:
        self.discover()
        self.write_meta()
        self.log(f"cluster {self.config.cluster}: {sum(n.alive for n in self.nodes.values())} node(s), "
                 f"{len(self.classes)} machine class(es); probing {len(self.names)} implementations ...")
        with progress_bar(self.progress, 0) as self.bar:
            self.task = self.bar.add_task("study", total=0)
            self.total = 0
            self.probe_and_plan()
            self._grow(sum(len(q) for q in self.queue.values()))
            last_refresh = time.monotonic()
            while True:
                self.dispatch()
                if not self.inflight and not self.describing:
                    stranded = {c: len(q) for c, q in self.queue.items() if q}
                    if not stranded:
                        break
                    if not any(self._pick_node(i) for c in stranded for i in self.queue[c] if self._eligible(i)):
                        for cls, n in stranded.items():
                            self.log(f"machine {cls}: {n} task(s) not run: no live node of this machine is left; "
                                     "`--resume` runs them when nodes are back")
                        break
                busy = {n.node_id for _, n, _ in self.inflight.values()}
                self.bar.update(self.task, description=f"{len(self.inflight)} running on {len(busy)} node(s)")
                ready, _ = self.ray.wait(list(self.inflight) + list(self.describing), num_returns=1, timeout=1.0)
                for ref in ready:
                    self.collect(ref)
                if time.monotonic() - last_refresh > REFRESH_S:
                    self.refresh()
                    last_refresh = time.monotonic()
        append_record(self.results, dict(kind="end", run_id=self.run_id, finished=now(), nodes={
            n.node_id: dict(host=n.host, machine_class=n.machine_class, alive=n.alive) for n in self.nodes.values()}))
        return self.results


def _first_line(error) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _describe(item: Item) -> str:
    if item.kind == "roof":
        return f"GEMM roof ({item.when})"
    return f"{item.job['impl']} {item.job['cell']} {item.job['workload_name']} (process {item.index + 1})"
