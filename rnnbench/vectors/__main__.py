"""`python -m rnnbench.vectors`: regenerate the shared test vectors, or `--check` them.

    python -m rnnbench.vectors            # write every case + manifest.json into rnnbench/vectors/
    python -m rnnbench.vectors --check    # verify sha256s and that regenerating gives the same arrays
    python -m rnnbench.vectors --out DIR  # write somewhere else (e.g. to compare)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import VECTORS_DIR
from .generate import CASES, check, generate


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rnnbench.vectors", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="verify the files against the manifest and a fresh regeneration; write nothing")
    parser.add_argument("--out", type=Path, default=VECTORS_DIR,
                        help=f"directory to write or check (default: {VECTORS_DIR})")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.out)
        if problems:
            print(f"{len(problems)} problem(s) in {args.out}:", *problems, sep="\n  ", file=sys.stderr)
            return 1
        print(f"{len(CASES)} vector cases in {args.out} verify and regenerate identically")
        return 0
    manifest = generate(args.out)
    total = sum((args.out / e["file"]).stat().st_size for e in manifest["cases"].values())
    print(f"wrote {len(manifest['cases'])} cases ({total / 1024:.0f} KiB) and manifest.json to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
