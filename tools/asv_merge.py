"""Collect asv results recorded on several machines into one results folder, for one `asv publish`.

    python -m tools.asv_merge .asv/results collected/epyc/.asv/results collected/h200/.asv/results
    asv publish && python -m tools.asv_offline .asv/html        (make bench-merge FROM="..." does all three)

asv keeps each machine's results in `<results>/<machine>/` (its `machine.json` and one file per
commit and environment) beside one `benchmarks.json`; its site has a machine dimension, so the
published history shows every machine side by side.  This copies each source's machine folders
into the destination and merges the benchmark descriptions.  It refuses, naming the machine, what
would mix two machines or lose a result: a machine folder of the same name whose machine.json
describes another machine (name the machines apart: `make bench MACHINE=name`), and a result file
that exists on both sides with other contents (the same commit measured twice on one machine: keep
one).  Exit status 0 when merged, 1 with the reason otherwise.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


class MergeError(RuntimeError):
    pass


def machines(results: Path) -> list[Path]:
    """The machine folders of an asv results folder (those with a machine.json)."""
    return sorted(p.parent for p in Path(results).glob("*/machine.json"))


def merge(dest: Path, sources: list[Path]) -> list[str]:
    """Copy every source's machine folders into `dest` and merge benchmarks.json; return the
    names of the machines now in `dest`.  Checks everything before copying anything."""
    dest = Path(dest)
    plan: dict[Path, Path] = {}  # destination file -> the source file copied there

    def current(target: Path) -> bytes | None:  # what `target` will hold: planned, or already there
        return plan[target].read_bytes() if target in plan else target.read_bytes() if target.exists() else None

    benchmarks = json.loads((dest / "benchmarks.json").read_text()) if (dest / "benchmarks.json").exists() else {}
    for source in map(Path, sources):
        if source.resolve() == dest.resolve():
            continue
        found = machines(source)
        if not found:
            raise MergeError(f"{source}: no machine folder (<name>/machine.json): not an asv results folder "
                             "(.asv/results of a machine that ran `make bench`)")
        for folder in found:
            target = dest / folder.name
            theirs = json.loads((folder / "machine.json").read_text())
            if current(target / "machine.json") is not None:
                ours = json.loads(current(target / "machine.json"))
                if ours != theirs:
                    raise MergeError(f"machine {folder.name!r}: {source} and {dest} describe two different machines "
                                     f"under one name ({_describe(theirs)} / {_describe(ours)}); record them under "
                                     "different names (make bench MACHINE=...)")
            for path in sorted(folder.glob("*.json")):
                other = target / path.name
                if current(other) not in (None, path.read_bytes()) and path.name != "machine.json":
                    raise MergeError(f"machine {folder.name!r}: {path.name} differs between {source} and what is "
                                     "merged already (the same commit measured twice on one machine): keep one of them")
                plan[other] = path
        extra = source / "benchmarks.json"
        if extra.exists():
            for name, desc in json.loads(extra.read_text()).items():
                if name != "version" and name in benchmarks and benchmarks[name] != desc:
                    # the same benchmark, another version of its code: asv keys results by that version
                    print(f"asv_merge: {name}: its description differs in {source}; keeping the first",
                          file=sys.stderr)
                benchmarks.setdefault(name, desc)
    for target, path in plan.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    if benchmarks:
        (dest / "benchmarks.json").write_text(json.dumps(benchmarks, indent=4, sort_keys=True))
    return [p.name for p in machines(dest)]


def _describe(machine: dict) -> str:
    return ", ".join(str(machine.get(k)) for k in ("cpu", "num_cpu", "arch") if machine.get(k)) or "?"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 1
    try:
        names = merge(Path(argv[0]), [Path(a) for a in argv[1:]])
    except MergeError as e:
        print(f"asv_merge: {e}", file=sys.stderr)
        return 1
    print(f"asv_merge: {argv[0]} holds the results of {len(names)} machine(s): {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
