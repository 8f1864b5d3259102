"""`python -m tools.docs_figures`: render (or check) every figure of README.md and docs/*.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .pages import TEMPORARILY_EXEMPT, Renderer, differences, pages, render_page, unmarked_figures
from .records import ROOT, FigureError


def run(root: Path = ROOT, *, check: bool, out=print) -> int:
    """Render (or, with `check`, verify) every page; return the exit status."""
    renderer = Renderer(root)
    failed = False
    for page in pages(root):
        name = page.relative_to(root).as_posix()
        text = page.read_text()
        new, problems = render_page(text, renderer)
        changed = differences(text, new)
        if check:
            problems = changed + problems
        elif new != text:
            page.write_text(new)
            out(f"{name}: {len(changed)} figure(s) rendered again")
        if name not in TEMPORARILY_EXEMPT:
            problems += [f"{p}: a measured figure written by hand (mark it: <!--fig KEY-->...<!--/fig-->)"
                         for p in unmarked_figures(new)]
        for p in problems:
            out(f"{name}:{p}")
        failed |= bool(problems)
    if check and not failed:
        out("every figure matches its record")
    return 1 if failed else 0


def cmd_docs(args) -> int:
    root = Path(args.root)
    if args.show:
        renderer = Renderer(root)
        try:
            for key in args.show:
                print(renderer.render_block(key) if key.startswith("study:table/") else renderer.render(key))
        except FigureError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    return run(root, check=args.check)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "docs", help="render every figure of README.md and docs/*.md from the committed records",
        description="Rewrite every <!--fig KEY-->...<!--/fig--> and <!--begin KEY-->...<!--end KEY--> of "
                    "README.md and docs/*.md from the committed records (docs/records/full-2026-12-03/results.jsonl, JSON "
                    "files); --check changes nothing and exits 1 listing every figure that disagrees, has "
                    "no record, or is written by hand.  Key grammar: tools/docs_figures/__init__.py.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 on any disagreement")
    p.add_argument("--show", action="append", metavar="KEY", help="print what KEY renders to (repeatable)")
    p.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_docs)
