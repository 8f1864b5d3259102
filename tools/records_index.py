"""The index of docs/records/: each record, what made it, on which machine, and what it backs.

    python -m tools.records_index           # write docs/records/README.md
    python -m tools.records_index --check   # exit 1 if it is not what the records say now

A record is a study run (a folder holding `results.jsonl`), a set of runs summarised together (a
folder holding `summary.json` beside its `run-N/` folders: `make reproducibility`), a JSON file of a
tool or experiment, the asv results (`asv/results`), or a GPU check's folder (`gpu/DATE`).  A run
keeps its `results.jsonl` only: `rnnbench report FOLDER` writes its report and plots again.  What made it comes from the
record itself (a run's `meta` line, a JSON file's `command`/`script`/`argv`); what it backs is every
figure marker (`<!--fig study@PATH:...-->`, `json:PATH:...`) and link in README.md and docs/*.md that
names its path (the notes a record keeps beside itself, `README.md` files under docs/records/,
included).  Every other file under docs/records/ belongs to a record, and every record backs something:
tests/tools/test_records_index.py checks both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = "docs/records"
INDEX = f"{RECORDS}/README.md"
REF = re.compile(r"(?:study@|json:|\]\(|`)((?:\.\./)*(?:docs/)?records/[\w./\-]*[\w\-])")


@dataclass
class Record:
    path: str  # from the repository root
    made_by: str = ""
    machine: str = ""
    date: str = ""
    backs: dict[str, int] = field(default_factory=dict)  # page -> references


def _machine(m) -> str:
    if isinstance(m, str):
        return m
    if not isinstance(m, dict):
        return ""
    isa = m.get("isa") or []
    feats = [f for f in ("avx512f", "avx512_bf16", "avx_vnni", "amx_tile") if f in isa]
    if not isa:
        feats = [name for name, on in (("AVX-512", m.get("avx512")), ("AMX", m.get("amx"))) if on]
    cores = m.get("logical_cpus") or m.get("cores")
    return ", ".join(str(x) for x in [m.get("cpu"), f"{cores} CPUs" if cores else None, *feats] if x)


def _study(folder: Path, root: Path) -> Record:
    rec = Record(folder.relative_to(root).as_posix())
    with open(folder / "results.jsonl") as f:
        meta = json.loads(f.readline())
    if meta.get("kind") == "meta":
        rec.made_by = "rnnbench " + " ".join(meta.get("argv", []))
        rec.machine = _machine(meta.get("machine"))
        rec.date = str(meta.get("started", ""))[:10]
    return rec


def _json(path: Path, root: Path) -> Record:
    rec = Record(path.relative_to(root).as_posix())
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        command = data.get("command") or data.get("script") or ""
        if data.get("argv") and command and " " not in str(command):
            command = f"{command} {' '.join(map(str, data['argv']))}"
        rec.made_by = str(command)
        rec.machine = _machine(data.get("machine") or data.get("cpu") or "")
        rec.date = str(data.get("date") or data.get("started") or "")[:10]
    return rec


def records(root: Path = ROOT) -> list[Record]:
    base = root / RECORDS
    studies = sorted(p.parent for p in base.rglob("results.jsonl"))
    sets = sorted(p.parent for p in base.rglob("summary.json") if any(p.parent.glob("run-*/results.jsonl")))
    gpu = sorted(p for p in (base / "gpu").iterdir() if p.is_dir()) if (base / "gpu").is_dir() else []
    grouped = [g for g in (base / "asv" / "results", *gpu, *sets) if g.is_dir()]
    out = [_study(p, root) for p in studies if not any(g in p.parents for g in grouped)]
    for g in grouped:
        rec = _study(next(iter(sorted(g.glob("run-*")))), root) if g in sets else Record("")
        rec.path = g.relative_to(root).as_posix()
        if g in sets:
            rec.made_by = "make reproducibility: " + rec.made_by
        out.append(rec)
    for p in sorted(base.rglob("*.json")):
        if not any(s == p.parent or s in p.parents for s in studies + grouped):
            out.append(_json(p, root))
    return sorted(out, key=lambda r: r.path)


def stray_files(recs: list[Record], root: Path = ROOT) -> list[str]:
    """Files under docs/records/ that belong to no record (the index itself aside)."""
    owned = [root / r.path for r in recs]
    return sorted(p.relative_to(root).as_posix() for p in (root / RECORDS).rglob("*") if p.is_file()
                  and p.name != "README.md" and not any(o == p or o in p.parents for o in owned))


def pages(root: Path = ROOT) -> list[Path]:
    """README.md, docs/*.md and the notes beside the records (docs/records/**/README.md)."""
    notes = sorted(p for p in (root / RECORDS).rglob("README.md") if p != root / INDEX)
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *notes]


def attach_references(recs: list[Record], root: Path = ROOT) -> None:
    for page in pages(root):
        name = page.relative_to(root).as_posix()
        for ref in REF.findall(page.read_text()):
            ref = "docs/" + ref.split("records/", 1)[0].replace("../", "").removeprefix("docs/") + "records/" + \
                ref.split("records/", 1)[1]
            for rec in recs:
                if rec.path == ref or rec.path.startswith(ref + "/") or ref.startswith(rec.path + "/"):
                    rec.backs[name] = rec.backs.get(name, 0) + 1


def render(recs: list[Record]) -> str:
    lines = ["# Records", "",
             "Every measurement the documentation quotes comes from a committed record below: what made it,",
             "on which machine, and the pages whose figures or links rest on it. A time from one machine is",
             "compared only with times from the same machine. Generated by `python -m tools.records_index`",
             "(tests/tools/test_records_index.py checks that it is current and that every record backs something).",
             "", "| record | made by | machine | date | backs |", "|---|---|---|---|---|"]
    for r in recs:
        rel = r.path.removeprefix(RECORDS + "/")
        backs = ", ".join(f"[{p.removeprefix('docs/')}]({os.path.relpath(p, RECORDS)}) ({n})"
                          for p, n in sorted(r.backs.items()))
        made = f"`{r.made_by}`" if r.made_by else ""
        lines.append(f"| [{rel}]({rel}) | {made} | {r.machine} | {r.date} | {backs or 'nothing'} |")
    return "\n".join(lines) + "\n"


def build(root: Path = ROOT) -> tuple[list[Record], str]:
    recs = records(root)
    attach_references(recs, root)
    return recs, render(recs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.records_index", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the index is stale")
    args = parser.parse_args(argv)
    recs, text = build()
    problems = [f"{r.path}: backs nothing (quote it, or do not commit it)" for r in recs if not r.backs]
    problems += [f"{p}: belongs to no record" for p in stray_files(recs)]
    index = ROOT / INDEX
    if args.check:
        if not index.exists() or index.read_text() != text:
            problems.append(f"{INDEX} is stale: run python -m tools.records_index")
    else:
        index.write_text(text)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
