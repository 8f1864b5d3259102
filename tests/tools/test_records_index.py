"""docs/records/README.md is the index the records make now, and every record backs something."""

from __future__ import annotations

import json
import shutil

from tests.support import ROOT
from tools import records_index


def test_the_committed_index_is_current_and_every_record_backs_a_page(capsys):
    assert records_index.main(["--check"]) == 0, capsys.readouterr().err


def _tree(tmp_path):
    (tmp_path / "docs" / "records" / "gpu").mkdir(parents=True)
    run = tmp_path / "docs" / "records" / "make-run" / "box"
    run.mkdir(parents=True)
    meta = {"kind": "meta", "argv": ["compare", "--out", "x"], "started": "2026-12-07T00:00:00",
            "machine": {"cpu": "Box", "logical_cpus": 2, "isa": ["avx2"]}}
    (run / "results.jsonl").write_text(json.dumps(meta) + "\n")
    (tmp_path / "docs" / "records" / "power.json").write_text(json.dumps({"command": "make gate-power", "date": "d"}))
    (tmp_path / "README.md").write_text("See [the run](docs/records/make-run/box).\n")
    (tmp_path / "docs" / "asv.md").write_text("<!--fig json:docs/records/power.json:rate-->1<!--/fig-->\n")
    (tmp_path / "docs" / "records" / "asv" / "results").mkdir(parents=True)
    return tmp_path


def test_what_each_record_was_made_by_and_backs(tmp_path):
    recs, text = records_index.build(_tree(tmp_path))
    by = {r.path: r for r in recs}
    run = by["docs/records/make-run/box"]
    assert run.made_by == "rnnbench compare --out x" and run.machine == "Box, 2 CPUs" and run.date == "2026-12-07"
    assert run.backs == {"README.md": 1}
    assert by["docs/records/power.json"].backs == {"docs/asv.md": 1}
    assert by["docs/records/asv/results"].backs == {}  # nothing cites it: the check says so
    assert "| [make-run/box](make-run/box) | `rnnbench compare --out x` |" in text


def test_a_stray_file_and_an_uncited_record_are_found(tmp_path):
    root = _tree(tmp_path)
    (root / "docs" / "records" / "notes.txt").write_text("x")
    recs, _ = records_index.build(root)
    assert records_index.stray_files(recs, root) == ["docs/records/notes.txt"]
    assert [r.path for r in recs if not r.backs] == ["docs/records/asv/results"]
    shutil.rmtree(root / "docs" / "records" / "asv")
    assert all(r.backs for r in records_index.build(root)[0])
    assert ROOT.joinpath(records_index.INDEX).exists()
