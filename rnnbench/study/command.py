"""`rnnbench compare` (the study behind `make run`), `rnnbench ladder` and `rnnbench report`."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from rnnbench.core import cell_modules, precision, registry
from rnnbench.core.catalogue import CELL_DEFS, STANDARD_CELLS
from rnnbench.core.spec import CELLS
from rnnbench.measure.threads import DEFAULT_THREADS
from rnnbench.measure.workloads import SPEC_EXAMPLE, SWEEP_LEVELS, resolve

DEFAULT_WORKLOADS = "S1,S2"
FIRST_CALL_WORKLOADS = "T100,T1000"  # the T sweep's sizes (B=16, I=H=128): only T differs
# What `rnnbench compare` measures by default ("answer": the first answer a newcomer waits for) and
# with --profile full (the whole grid); explicit options override either.
# The answer profile spends less (a shorter timed phase, three processes and no more): the interval
# comes from the spread between processes, which more pairs in one process do not narrow, and on
# two cores a fourth process per measurement rarely met the +-3% target while it cost a quarter of
# the run (docs/study.md).
# Each value is what an option left out means under that profile; "auto" is computed from the run
# (`resolve_profile`); the --help text of each option is written from this table.
PROFILES = {"answer": dict(workloads=DEFAULT_WORKLOADS, sweeps="none", first_call="none", budget=1.0, max_processes=3,
                           precisions="none", custom_cells="none", one_thread="none"),
            "full": dict(workloads="S1,S2,R1", sweeps="small", first_call=FIRST_CALL_WORKLOADS, budget=2.0,
                         max_processes=5, precisions=",".join(precision.REDUCED), custom_cells="auto",
                         one_thread="auto")}
AUTO = {"custom_cells": "every catalogue cell but lstm and gru (and those --cell-modules register) unless --cells "
                        "is given",
        "one_thread": "the batch-1 workloads among --workloads (S2) when --threads > 1"}


def profile_default(name: str) -> str:
    """How --help states an option's default: per profile, from `PROFILES`."""
    return "; ".join(f"{profile} profile: {AUTO.get(name, '') if values[name] == 'auto' else values[name]}"
                     for profile, values in PROFILES.items())
REPORTS = Path("reports")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _precision_list(value: str) -> list[str]:
    names = [] if value.strip() == "none" else _csv(value)
    for name in names:
        try:
            precision.precision(name)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return names


def _cell_list(value: str) -> list[str]:
    # Checked against the catalogue only once --cell-modules are imported (see _check_cells).
    cells = _csv(value)
    if not cells:
        raise argparse.ArgumentTypeError(f"expected comma-separated cell names, got {value!r}")
    return cells


def _check_cells(cells: list[str], option: str) -> list[str]:
    """Any catalogue cell (rnnbench.core.catalogue: lstm, gru, ln_lstm, peephole_lstm, gru_reset_before, and the
    cells --cell-modules / RNNBENCH_CELL_MODULES register); implementations that lack one are reported
    unsupported, with their reason."""
    bad = [c for c in cells if c not in CELL_DEFS]
    if bad:
        raise SystemExit(f"rnnbench: {option}: unknown cell(s) {', '.join(map(repr, bad))}; valid: "
                         f"{', '.join(CELL_DEFS)} (a cell of your own: name the module that registers it with "
                         f"--cell-modules or {cell_modules.ENV})")
    return cells


def select_cells(cells: list[str] | None, custom: list[str] | None) -> tuple[list[str], list[str]]:
    """(cells measured in full, custom cells measured forward+backward on the custom workloads).

    Defaults: lstm, gru in full; every other registered cell (the catalogue's custom cells and
    those --cell-modules register) as custom cells, unless `cells` was given: an explicit
    --cells measures exactly those.  A cell of `cells` is not measured again as a custom cell.
    """
    chosen = _check_cells(cells or list(CELLS), "--cells")
    if custom is not None:
        extra = _check_cells(custom, "--custom-cells")
    else:
        extra = [] if cells else [c for c in CELL_DEFS if c not in STANDARD_CELLS]
    return chosen, [c for c in extra if c not in chosen]


def _custom_cell_list(value: str) -> list[str]:
    return [] if value.strip() == "none" else _cell_list(value)


def _module_list(value: str) -> list[str]:
    try:
        return cell_modules.parse(value)
    except cell_modules.CellModuleError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _load_cell_modules(args) -> None:
    """Import RNNBENCH_CELL_MODULES and --cell-modules here, and export them to the workers."""
    try:
        cell_modules.export(args.cell_modules or [])
    except cell_modules.CellModuleError as e:
        raise SystemExit(f"rnnbench: {e}") from None


def _impls(value: str) -> list[str] | None:
    if value in ("all", ""):
        return None
    names = registry.split_names(value)  # "torch.scan[freezing,mode=...]": a rung with options
    for n in names:
        try:
            registry.get(n)
        except registry.UnknownImplementationError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return names


def _workloads(value: str):
    try:
        return resolve(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _optional_workloads(value: str):
    return [] if value == "none" else _workloads(value)


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _add_measure_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--impls", type=_impls, default=None,
                   help="comma-separated implementations (default: every one available here except those the registry opts out, e.g. jax.naive, whose compile takes minutes); "
                        "a rung with options is NAME[OPTION,OPTION=VALUE], e.g. torch.scan[freezing], jax.scan[unroll=4]")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (default) or cuda")
    p.add_argument("--dtype", choices=precision.ALL, default="float32",
                   help="the precision of the main measurements (default float32; rnnbench.core.precision)")
    p.add_argument("--precisions", type=_precision_list, default=None,
                   help="comma-separated precisions measured besides --dtype on the first workload, for the "
                        f"report's precision table (default: {profile_default('precisions')}; 'none' for none; a "
                        "device without the arithmetic skips them with the reason)")
    p.add_argument("--repeats", type=_positive_int, default=10,
                   help="timed calls per phase (default 10; fewer past --budget, more under --min-time)")
    p.add_argument("--min-time", type=float, default=0.25,
                   help="seconds a phase of fast calls is timed for at least, past --repeats "
                        "(at most 1000 calls, worker.MAX_TIMED_CALLS; default 0.25)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds per timed phase after which timing stops (after at least 3 calls or 5 pairs; "
                        f"default: {profile_default('budget')})")
    p.add_argument("--processes", type=_positive_int, default=3,
                   help="fresh processes per measurement, the unit of the ratio's interval (default 3)")
    p.add_argument("--max-processes", type=_positive_int, default=None,
                   help="more processes, up to this many, for a measurement whose interval is still wider than "
                        f"--target (default: {profile_default('max_processes')}; equal to --processes for a fixed "
                        "count)")
    p.add_argument("--start-method", choices=("forkserver", "spawn"), default="forkserver",
                   help="how a measurement's fresh process starts: forked from a server that has imported torch "
                        "(and jax) once, or a new interpreter that imports them itself (default forkserver; "
                        "CUDA runs and the cluster always spawn)")
    p.add_argument("--target", type=float, default=0.03,
                   help="half-width of a tight 95%% interval, relative to the ratio (default 0.03: ±3%%)")
    p.add_argument("--timeout", type=float, default=240.0,
                   help="seconds per measurement process before it is killed as hung (default 240)")
    p.add_argument("--threads", type=_positive_int, default=DEFAULT_THREADS,
                   help=f"threads for both frameworks (default {DEFAULT_THREADS})")
    p.add_argument("--max-memory-gb", type=float, default=None,
                   help="kill a measurement whose processes exceed this (default: 80%% of memory)")
    p.add_argument("--out", type=Path, default=None, help="report directory (default reports/<timestamp>)")
    p.add_argument("--resume", action="store_true", help="continue --out (default: the latest report), "
                   "skipping what is recorded")
    p.add_argument("--retry-failed", action="store_true", help="with --resume, measure failed rows again")
    p.add_argument("--retry-flagged", action="store_true",
                   help="with --resume, measure again the rows the report flags under Sanity (noise, impossible figures)")
    p.add_argument("--no-parity", dest="parity", action="store_false", help="skip the parity column")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--cell-modules", type=_module_list, default=None, metavar="MODULES",
                   help=f"comma-separated modules that register your own cells when imported; imported here and "
                        f"in every measurement process (sets {cell_modules.ENV} for them)")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="the comparative study: implementation x cell x workload, table + report with plots",
        description="Measure every implementation x cell x workload, each in its own subprocess, appending "
                    "JSON lines; then print the table and write report.md, CSV and plots.")
    p.add_argument("--profile", choices=tuple(PROFILES), default="answer",
                   help="answer (default): LSTM and GRU on S1 and S2, every rung one would pick (not the ladder's "
                        "steps: naive, cell_loop, jit, flax_nnx), forward and forward+backward, with intervals "
                        "(each measurement in 3 processes; docs/study.md gives its length on 2 cores); full: "
                        "every rung, also R1, the T and B sweeps, the reduced precisions, the compile options, the "
                        "custom cells, first calls at T=100 and T=1000 and S2 on one thread. Options given "
                        "explicitly override the profile's")
    p.add_argument("--cells", type=_cell_list, default=None,
                   help="comma-separated cells measured on every workload, forward and forward+backward: "
                        "lstm,gru (default), or any catalogue cell (ln_lstm, peephole_lstm, gru_reset_before, "
                        "your own with --cell-modules)")
    p.add_argument("--custom-cells", type=_custom_cell_list, default=None,
                   help="cells measured forward+backward only, on --custom-workloads, against the plain cells "
                        f"(the report's custom-cells table; default: {profile_default('custom_cells')}; 'none' for "
                        "none)")
    p.add_argument("--custom-workloads", type=_workloads, default=None,
                   help="workloads of --custom-cells (default: the first of --workloads, S1)")
    p.add_argument("--workloads", type=_workloads, default=None,
                   help=f"workload or profile names (quick, cpu, gpu, S1, S2, S3, ...; default: "
                        f"{profile_default('workloads')}; gpu with --device cuda); your own model as a spec, e.g. "
                        f"\"{SPEC_EXAMPLE}\" (fields T, B, I, H, layers, bidirectional, lengths, name), "
                        "or @FILE with one spec or names a line; separate names and specs with ';'")
    p.add_argument("--sweeps", choices=SWEEP_LEVELS, default=None,
                   help=f"T and B sweeps for the plots (LSTM, --sweep-impls only; default: "
                        f"{profile_default('sweeps')})")
    p.add_argument("--sweep-impls", type=_impls, default=None,
                   help="implementations in the sweeps (default torch.bptt,torch.native,jax.scan)")
    p.add_argument("--first-call", type=_optional_workloads, default=None, metavar="WORKLOADS",
                   help="workloads of the first-call group: the first forward and forward+backward (trace + "
                        "compile) of torch.compile, torch.scan, jax.scan, jax.bptt (LSTM), cold and warm compile "
                        f"cache (default: {profile_default('first_call')}; T100, T1000: T=100 and T=1000, the "
                        "same B, I, H)")
    p.add_argument("--one-thread", type=_optional_workloads, default=None, metavar="WORKLOADS",
                   help="workloads measured forward again on 1 thread, with their GEMM roof, for the report's "
                        "threads section (LSTM, torch.native,torch.bptt,jax.scan,jax.bptt; default: "
                        f"{profile_default('one_thread')}; 'none' for none)")
    p.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="run the measurements as tasks on a Ray cluster (host:port of its head, or auto): each node "
                        "advertises measurement slots (ray start --resources '{\"rnnbench_slot\": 1}'; one per GPU on "
                        "a GPU node) and each measurement takes one; records name the machine they ran on and the report "
                        "compares times only within a machine (docs/cluster.md). Default: here, no Ray")
    _add_measure_options(p)
    p.set_defaults(func=cmd_compare)

    p = subparsers.add_parser(
        "ladder", help="the ladder (naive -> ... -> native) for one cell: what each rung buys",
        description="Run (or read with --from) only the ladder for one cell and workload; print and plot it.")
    p.add_argument("--cell", default="lstm",
                   help="a catalogue cell (default lstm; ln_lstm, ...; your own with --cell-modules)")
    p.add_argument("--workload", default="S1", help="workload name (default S1)")
    p.add_argument("--from", dest="from_", type=Path, default=None,
                   help="read this results.jsonl instead of measuring")
    _add_measure_options(p)
    p.set_defaults(func=cmd_ladder)
    register_report(subparsers)


def _out_dir(args, prefix: str = "") -> Path:
    if args.out is not None:
        return args.out
    if args.resume:
        previous = sorted(p.parent for p in REPORTS.glob("*/results.jsonl"))
        if not previous:
            raise SystemExit("--resume: no previous report under reports/; pass --out DIR")
        return previous[-1]
    return REPORTS / (prefix + datetime.now().strftime("%Y%m%d-%H%M%S"))


def _or_profile(value, name: str, profile: str = "answer"):
    return PROFILES[profile][name] if value is None else value


def _config(args, out: Path, **overrides):
    from .planning import DEFAULT_SWEEP_IMPLS, StudyConfig

    kw = dict(out=out, impls=args.impls, device=args.device, dtype=args.dtype, threads=args.threads,
              precisions=args.precisions if args.precisions is not None else [],
              repeats=args.repeats, budget_s=_or_profile(args.budget, "budget"), min_time_s=args.min_time,
              timeout=args.timeout, processes=args.processes,
              max_processes=max(args.processes, _or_profile(args.max_processes, "max_processes")),
              target_half_width=args.target, start_method=args.start_method,
              max_memory_gb=args.max_memory_gb,
              parity=args.parity, resume=args.resume, retry_failed=args.retry_failed, retry_flagged=args.retry_flagged,
              argv=sys.argv[1:] if sys.argv and sys.argv[0].endswith(("rnnbench", "cli.py", "__main__.py")) else None)
    kw.update(overrides)
    kw.setdefault("sweep_impls", DEFAULT_SWEEP_IMPLS)
    return StudyConfig(**kw)


def _console(table: bool = True):
    """Rich's console: wide enough for a whole table (a row is never cut: a narrow terminal wraps
    it instead), or the terminal's width for text."""
    from rich.console import Console

    return Console(width=max(Console().width, 400)) if table else Console()


def _run_or_explain(config, progress: bool):
    """run_study; on Ctrl-C (or SIGTERM) say what was kept and how to resume, return None."""
    import signal

    from . import run_study

    def _terminate(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return run_study(config, progress=progress)
    except RuntimeError as e:
        if type(e).__name__ == "ClusterError":  # the cluster module is not imported without --cluster
            raise SystemExit(f"rnnbench: {e}") from None
        raise
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished measurement is in {config.out / 'results.jsonl'}; "
              f"continue by running the same command with `--resume --out {config.out}`", file=sys.stderr)
        return None
    finally:
        signal.signal(signal.SIGTERM, previous)


def resolve_profile(args) -> tuple[list[str], list[str], list]:
    """Fill every option left out (None) with its profile's value (`PROFILES`, "auto" computed here);
    return (cells, custom cells, workloads)."""
    values = PROFILES[args.profile]
    workloads = args.workloads or resolve("gpu" if args.device == "cuda" else values["workloads"])
    custom = args.custom_cells
    if custom is None and values["custom_cells"] != "auto":
        custom = _custom_cell_list(values["custom_cells"])
    cells, custom = select_cells(args.cells, custom)
    if args.sweeps is None:
        args.sweeps = values["sweeps"]
    args.budget = _or_profile(args.budget, "budget", args.profile)
    args.max_processes = _or_profile(args.max_processes, "max_processes", args.profile)
    if args.precisions is None:
        args.precisions = _precision_list(values["precisions"])
    if args.one_thread is None:
        args.one_thread = ([w for w in workloads if w.batch == 1] if args.threads > 1 else []) \
            if values["one_thread"] == "auto" else _optional_workloads(values["one_thread"])
    if args.first_call is None:
        args.first_call = _optional_workloads(values["first_call"])
    if args.impls is None:  # full: the measured options of the compiled rungs too
        args.impls = registry.default_study_names(args.profile) + (
            list(registry.MEASURED_OPTIONS) if args.profile == "full" else [])
    return cells, custom, workloads


def cmd_compare(args) -> int:
    from .merge import machine_groups
    from .report import write_report
    from .planning import DEFAULT_SWEEP_IMPLS
    from .records import read_records
    from .table import collect, custom_cell_rows, custom_rich, precision_rich, precision_rows, rich_table, table_rows

    _load_cell_modules(args)
    cells, custom, workloads = resolve_profile(args)
    out = _out_dir(args)
    config = _config(args, out, cells=cells, workloads=workloads, sweeps=args.sweeps, cluster=args.cluster,
                     sweep_impls=tuple(args.sweep_impls or DEFAULT_SWEEP_IMPLS), custom_cells=custom,
                     custom_workloads=args.custom_workloads or workloads[:1], precisions=args.precisions,
                     one_thread_workloads=args.one_thread, first_call_workloads=args.first_call)
    results = _run_or_explain(config, args.progress)
    if results is None:
        return 130
    command = "rnnbench " + " ".join(sys.argv[1:]) if config.argv else None
    records = read_records(results)
    groups = machine_groups(records)
    if len(groups) > 1:  # a cluster of several machines: no table mixes them
        report = write_report(results, command=command)
        _print_answers(groups)
        _console().print(f"report: {report}")
        return 0
    res = collect(next(iter(groups.values())).records if groups else records)
    console = _console()
    console.print(rich_table([r for r in table_rows(res) if r["group"] == "main"],
                             title=f"rnnbench compare ({args.device}, {args.threads} threads, ratios to torch.native "
                                   "from this run)"))
    precision_rows_ = [r for r in precision_rows(res) if r["status"] != "skipped"]
    if any(r["group"] == "precision" for r in precision_rows_):
        console.print(precision_rich(precision_rows_, "precision (median ms; ratio to float32 nn.LSTM / nn.GRU "
                                                      "of this run; error / derived bound)"))
    custom_rows = custom_cell_rows(res)
    if custom_rows:
        console.print(custom_rich(custom_rows, "custom cells (fwd+bwd): ratio to plain nn.LSTM / nn.GRU and "
                                               "cost over the same implementation's plain cell"))
    for name, reason in res.unavailable.items():
        console.print(f"[dim]unavailable: {name}: {reason}[/dim]")
    report = write_report(results, command=command)
    _print_answers(groups)  # the answer last: what the screen shows when the run ends
    console.print(f"report: {report}")
    return 0


def _print_answers(groups) -> None:
    """Each machine's answer; with several machines, the summary across them after."""
    from rich.markdown import Markdown

    from .merge import cross_machine_markdown
    from .report import answer_markdown
    from .table import collect

    console = _console(table=False)
    results = {cls: collect(g.records) for cls, g in groups.items()}
    if len(groups) <= 1:
        for res in results.values():
            console.print(Markdown(answer_markdown(res)))
        return
    names = {cls: f"M{i + 1}" for i, cls in enumerate(groups)}
    console.print(Markdown("\n".join(cross_machine_markdown(groups, results, names))))


def register_report(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="the report of one or more runs; runs made apart on different machines merge into one report "
                       "across machines",
        description="Write report.md, results.csv and the plots from the records of one or more runs of "
                    "`rnnbench compare`. Records of one machine give its report; of several machines (a cluster run, "
                    "or runs made apart), a report that divides times only within each machine, one section per "
                    "machine and a summary of the answers across them (docs/cluster.md).")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="report directories of rnnbench compare (or their results.jsonl files)")
    p.add_argument("--out", type=Path, default=None,
                   help="where to write (default: the run's own directory for one run, reports/merged-<timestamp> "
                        "for several)")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from .merge import load, machine_groups, results_files
    from .report import write_report

    try:
        files = results_files(args.runs)
    except FileNotFoundError as e:
        raise SystemExit(f"rnnbench report: {e}") from None
    out = args.out or (files[0].parent if len(files) == 1 else REPORTS / ("merged-" + datetime.now().strftime(
        "%Y%m%d-%H%M%S")))
    report = write_report(files, out, command="rnnbench " + " ".join(sys.argv[1:]) if sys.argv else None)
    _print_answers(machine_groups(load(files)))
    _console().print(f"report: {report}")
    return 0


def cmd_ladder(args) -> int:
    from .merge import machine_groups
    from .plots import plot_ladder
    from .records import read_records
    from .table import collect, ladder, ladder_markdown, ladder_rich

    _load_cell_modules(args)
    if args.from_ is not None:  # reading: a cell of the file needs no registration here
        if not args.from_.exists():
            raise SystemExit(f"--from {args.from_}: no such file")
        results = args.from_
        out = args.out or args.from_.parent
    else:
        _check_cells([args.cell], "--cell")
        out = _out_dir(args, prefix="ladder-")
        config = _config(args, out, cells=[args.cell], workloads=_workloads(args.workload), sweeps="none")
        results = _run_or_explain(config, args.progress)
        if results is None:
            return 130
    groups = machine_groups(read_records(results))
    if len(groups) > 1:
        raise SystemExit(f"{results} holds measurements of {len(groups)} machines; a ladder is one machine's: "
                         "`rnnbench report` writes one per machine")
    res = collect(next(iter(groups.values())).records if groups else [])
    workload, rows = ladder(res, args.cell, args.workload)
    if not rows:
        print(f"no {args.cell} measurements on {args.workload} in {results}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    console = _console()
    console.print(ladder_rich(rows, f"{args.cell.upper()} ladder on {workload}: what each rung buys"))
    for name, reason in res.unavailable.items():
        console.print(f"[dim]unavailable: {name}: {reason}[/dim]")
    png = plot_ladder(res, args.cell, out / f"ladder_{args.cell}.png", workload)
    (out / f"ladder_{args.cell}.md").write_text(f"# {args.cell.upper()} ladder on {workload}\n\n"
                                                 + ladder_markdown(rows) + "\n")
    console.print(f"plot: {png}")
    return 0
