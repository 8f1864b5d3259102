"""`python -m tools.docs_figures [--check] [--show KEY]` (`make docs`, `make docs-check`)."""

import argparse
import sys

from .command import register

parser = argparse.ArgumentParser(prog="python -m tools.docs_figures")
sub = parser.add_subparsers(dest="command")
register(sub)
args = parser.parse_args(["docs", *sys.argv[1:]])
sys.exit(args.func(args))
