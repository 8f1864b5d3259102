"""`rnnbench`: the command line (list implementations; more subcommands as they land)."""

from __future__ import annotations

import argparse
import sys

from . import registry


def cmd_list(args) -> int:
    for name in registry.names():
        impl = registry.get(name)
        reason = impl.unavailable_reason(args.device)
        status = "available" if reason is None else f"unavailable: {reason}"
        print(f"{name:16s} rung {impl.rung}  {impl.summary}\n{'':16s} {status}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rnnbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list every registered implementation and whether it runs here")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_list)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
