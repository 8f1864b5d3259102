"""`rnnbench`: the command line: `list`, `parity`, `compare`, `ladder`, `report`."""

from __future__ import annotations

import argparse
import importlib
import sys

from rnnbench.core import precision, registry
from rnnbench.core.catalogue import STANDARD_CELLS
from rnnbench.core.spec import RNNSpec

COMMAND_MODULES = [
    "rnnbench.parity",  # rnnbench parity
    "rnnbench.study.command",  # rnnbench compare, rnnbench ladder, rnnbench report
]


def cmd_list(args) -> int:
    if args.device == "cpu":
        print(f"CPU: {precision.isa_summary()}")
    for dtype in precision.ALL:  # what no rung computes on this device
        why = precision.device_reason(dtype, args.device)
        if why is not None:
            print(f"no rung runs {dtype} here: {why}")
    print()
    for name in registry.names():
        impl = registry.get(name)
        reason = impl.unavailable_reason(args.device)
        status = "available" if reason is None else f"unavailable: {reason}"
        print(f"{name:16s} rung {impl.rung}  {impl.summary}\n{'':16s} {status}")
        if reason is None:
            for line in not_here(impl, args.device):
                print(f"{'':16s} {line}")
    return 0


def not_here(impl, device: str) -> list[str]:
    """What a rung declares but cannot compute on this machine (its `Capabilities.machine`
    probes), one line per cell and precision with the reason."""
    declared, backends = impl.declared(), getattr(impl.adapter(), "backends", None)
    if declared.machine is None or backends is None:
        return []
    lines = []
    for dtype in declared.dtypes:
        for cell in STANDARD_CELLS:
            refused = backends.refusal(impl.key, RNNSpec(cell, 4, 4), dtype=dtype, device=device)
            if refused is not None and refused.what == "machine":
                lines.append(f"not {cell} in {dtype}: {refused.reason.split(': ', 1)[1]}")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rnnbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list every registered implementation and whether it runs here")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_list)
    # Each command module owns its subcommands: it defines `register(subparsers)`, which
    # adds parsers whose `func(args) -> int` runs them. Adding a command = one line here.
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)  # a module that fails to import is an error
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
