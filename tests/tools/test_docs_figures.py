"""Every measured figure of README.md and docs/*.md comes from a committed record (fast; imports no framework).

(a) every marked figure (`<!--fig KEY-->TEXT<!--/fig-->`) and generated block (`<!--begin KEY-->` ...
    `<!--end KEY-->`) is exactly its rendering from the committed records (`python -m tools.docs_figures` writes them);
(b) outside fenced code, generated blocks and marked figures no page holds a measured figure written by
    hand: a number with a unit (`1.15x`, `2.6 ms`, `20 us`, `4 s`, `241 GFLOP/s`, `98%`, `317 MiB`);
    a bound or target written `<= 1.1x` / `>= 80%` is a definition, not a measurement;
(c) a planted wrong figure, a planted unmarked figure and a key without a record are each caught.

docs/records/*/report.md is not checked here: `rnnbench.study.report.write_report` writes it with the time of
writing and this machine's reduced-precision features (`isa_summary()`), and draws the plots beside it,
so a re-rendering is neither deterministic nor cheap; its figures are the study's own output, and the
pages quote them through `study:` keys, which read the same records through the same table code.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import docs_figures as df
from rnnbench.study.formatting import format_ratio, ratio_interval

from tests.support import ROOT  # noqa: E402
PAGES = df.pages(ROOT)
IDS = [p.relative_to(ROOT).as_posix() for p in PAGES]


@pytest.fixture(scope="module")
def renderer():
    return df.Renderer(ROOT)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_figure_is_its_rendering_from_the_records(page, renderer):
    text = page.read_text()
    new, problems = df.render_page(text, renderer)
    problems += df.differences(text, new)
    assert not problems, (f"{page.name}: figures that disagree with their records or have none "
                          "(`make docs` renders them again):\n" + "\n".join(problems))


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_no_measured_figure_written_by_hand(page):
    name = page.relative_to(ROOT).as_posix()
    if name in df.TEMPORARILY_EXEMPT:
        pytest.skip(f"temporarily exempt: {df.TEMPORARILY_EXEMPT[name]}")
    found = df.unmarked_figures(page.read_text())
    assert not found, (f"{name}: measured figures written by hand; mark each as <!--fig KEY-->...<!--/fig--> "
                       "from a committed record (tools/docs_figures/), or drop it:\n" + "\n".join(found))


def test_exemptions_and_allowlist_stay_small():
    assert set(df.TEMPORARILY_EXEMPT) <= set(IDS) and len(df.TEMPORARILY_EXEMPT) <= 2
    assert len(df.ALLOWED) <= 5 and all(why for _, why in df.ALLOWED)


def _keys(pattern) -> list[str]:
    return [m["key"] for p in PAGES for m in pattern.finditer(p.read_text())]


def test_the_pages_quote_the_study_through_keys():
    keys = _keys(df.FIG)
    assert any(k.startswith("study:ratio/") for k in keys)
    assert "study:table/" in " ".join(_keys(df.BLOCK))


def test_records_behind_the_figures_are_committed():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    paths = {df.STUDY_RECORDS} | {k.split(":")[1] for k in _keys(df.FIG) if k.startswith("json:")}
    for k in _keys(df.FIG) + _keys(df.BLOCK):
        if k.startswith("study@"):
            path = k.split(":")[0].partition("@")[2]
            paths.add(path if path.endswith(".jsonl") else f"{path.rstrip('/')}/results.jsonl")
    for path in sorted(paths):
        proc = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT, capture_output=True)
        assert proc.returncode == 0, f"{path} is quoted by the docs but not committed"


@pytest.mark.parametrize("text", [
    "takes 2.6 ms", "0.84-1.06x native", "1.10x", "241 GFLOP/s", "98% of its time", "317 MiB", "2 GiB",
    "17 min", "in 4 s.", "~20-50 us per step", "15 µs", "+-30%", "x1.16 over eager", "(18-19 s cold)",
])
def test_the_detector_sees_a_measured_figure(text):
    assert df.unmarked_figures(f"Some prose {text} here.\n")


@pytest.mark.parametrize("text", [
    "T=100, B=64", "a 2-core CPU, 2 threads", "torch 2.13.0, jax 0.10.2", "a 64x512x2048 GEMM", "at most <= 1.1x",
    "(target >= 80%)", "2^-8 for bfloat16", "commit 75bd043", "1x256x1024", "3 steps", "S2@1t",
    "\n```bash\nrun it: 2.5 ms\n```\n", "<!--fig study:ms/a/b/c/train-->2.6 ms<!--/fig-->",
])
def test_the_detector_leaves_definitions_code_and_marked_figures(text):
    assert not df.unmarked_figures(f"Some prose {text} here.\n")


def test_a_ratio_renders_with_its_interval_when_it_has_one():
    assert format_ratio(1.1517) == "1.15x"
    assert format_ratio(1.1517, 1.111, 1.19) == "1.15x [1.11, 1.19]"
    assert format_ratio(None) == "n/a"
    assert ratio_interval("train", {"train_ratio": 1.1}, {"train_ratio_lo": 1.0, "train_ratio_hi": 1.2}) == (1.0, 1.2)
    assert ratio_interval("forward", {"train_ratio_lo": 1.0, "train_ratio_hi": 1.2}) == (None, None)


def _planted_root(tmp_path: Path, page: str, records: list[dict] | None = None) -> Path:
    (tmp_path / df.STUDY_RECORDS).parent.mkdir(parents=True)
    if records is None:
        shutil.copy(ROOT / df.STUDY_RECORDS, tmp_path / df.STUDY_RECORDS)
    else:
        (tmp_path / df.STUDY_RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "README.md").write_text(page)
    return tmp_path


def _check(root: Path) -> tuple[int, str]:
    lines: list[str] = []
    return df.run(root, check=True, out=lines.append), "\n".join(lines)


def test_a_planted_wrong_figure_is_caught_and_rendered_again(tmp_path, renderer):
    key = "study:ratio/torch.bptt/lstm/S1/train"
    right = renderer.render(key)
    root = _planted_root(tmp_path, f"The custom LSTM reaches <!--fig {key}-->0.84x<!--/fig--> native.\n")
    status, said = _check(root)
    assert status == 1 and "README.md:1" in said and "'0.84x'" in said and repr(right) in said
    assert df.run(root, check=False, out=lambda _: None) == 0  # rendered in place
    assert f"-->{right}<!--" in (root / "README.md").read_text()
    assert _check(root)[0] == 0


def test_a_planted_unmarked_figure_is_caught(tmp_path):
    root = _planted_root(tmp_path, "Line one.\n\n`nn.LSTM`'s forward takes 2-2.6 ms for 100 steps.\n")
    status, said = _check(root)
    assert status == 1 and "README.md:3: 2-2.6 ms" in said


def test_a_planted_table_edit_and_a_key_without_record_are_caught(tmp_path, renderer):
    key = "study:table/all/lstm/S1/train"
    table = renderer.render_block(key)
    edited = table.replace("1.15x", "1.06x")
    assert edited != table
    page = (f"Results:\n\n<!--begin {key}-->{df.block_body(edited)}<!--end {key}-->\n\n"
            "And <!--fig study:ratio/torch.bptt/lstm/S9/train-->1.00x<!--/fig--> nowhere.\n")
    status, said = _check(_planted_root(tmp_path, page))
    assert status == 1 and key in said and "no measurement of torch.bptt lstm S9" in said


def _bptt_records(train_s: float, ratio: float, lo: float, hi: float) -> list[dict]:
    """A run of two LSTM S1 measurements: native, and bptt with a paired train ratio and interval."""
    base = dict(kind="measurement", cell="lstm", workload_name="S1", device="cpu", dtype="float32", status="ok",
                group="main", forward_s=1.0, train_s=2.0, gflops_forward=10.0, gflops_train=15.0)
    return [{"kind": "meta", "run_id": "r", "started": "2026-01-01T00:00:00+00:00", "machine": {}},
            dict(base, key="native", impl="torch.native", framework="torch", rung=6),
            dict(base, key="bptt", impl="torch.bptt", framework="torch", rung=5, train_s=train_s,
                 train_ratio=ratio, train_ratio_lo=lo, train_ratio_hi=hi)]


def test_interval_fields_of_a_record_reach_the_rendered_ratio(tmp_path):
    r = df.Renderer(_planted_root(tmp_path, "", _bptt_records(2.3, 1.15, 1.11, 1.19)))
    assert r.render("study:ratio/torch.bptt/lstm/S1/train") == "1.15x [1.11, 1.19]"
    assert r.render("study:ratio/torch.bptt/lstm/S1/forward") == "1.00x"
    assert "| torch.bptt | 1.15x [1.11, 1.19] |" in r.render_block("study:table/all/lstm/S1/train")


def test_another_runs_records_render_through_study_at(tmp_path):
    records = _bptt_records(2.6, 1.3, 1.25, 1.36)
    root = _planted_root(tmp_path, "")
    run = root / "docs" / "records" / "run-0"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    r = df.Renderer(root)
    assert r.render("study@docs/records/run-0:ratio/torch.bptt/lstm/S1/train") == "1.30x [1.25, 1.36]"
    assert r.render("study@docs/records/run-0/results.jsonl:ratio/torch.bptt/lstm/S1/train") == "1.30x [1.25, 1.36]"
    assert r.render("study:ratio/torch.bptt/lstm/S1/train") != "1.30x [1.25, 1.36]"  # the committed study
    assert "| torch.bptt | 1.30x [1.25, 1.36] |" in r.render_block("study@docs/records/run-0:table/all/lstm/S1/train")
    with pytest.raises(df.FigureError, match="no study records"):
        r.render("study@docs/records/run-9:ratio/torch.bptt/lstm/S1/train")


def test_json_figures(tmp_path):
    root = _planted_root(tmp_path, "")
    (root / "docs" / "records").mkdir(exist_ok=True)
    (root / "docs" / "records" / "r.json").write_text(json.dumps({"a": {"b": [0.5, 1.234]}, "t": 2.5}))
    r = df.Renderer(root)
    assert r.render("json:docs/records/r.json:a.b.1:x") == "1.23x"
    assert r.render("json:docs/records/r.json:a.b.0:pct") == "50%"
    assert r.render("json:docs/records/r.json:t:ms") == "2.5 ms"
    assert r.render("json:docs/records/r.json:a.b.1:.1f") == "1.2"
    with pytest.raises(df.FigureError):
        r.render("json:docs/records/r.json:a.c")


def test_a_figure_at_the_start_of_a_line_is_refused(renderer):
    _, problems = df.render_page("<!--fig study:run/commit-->x<!--/fig--> is the commit.\n", renderer)
    assert problems and "opens a line" in problems[0]
    _, problems = df.render_page("1. A list item\n   <!--fig study:run/commit-->x<!--/fig--> is the commit.\n", renderer)
    assert problems and "opens a line" in problems[0]
    assert not df.render_page("- the commit <!--fig study:run/commit-->x<!--/fig-->\n", renderer)[1]


def test_imports_no_framework():
    code = ("import sys; from rnnbench import cli; from tools.docs_figures import run; "
            "assert run(check=True, out=lambda _: None) in (0, 1); "
            "bad = sorted(m for m in ('torch', 'jax', 'flax') if m in sys.modules); assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_a_broken_marker_is_caught(renderer):
    for page in ("Commit <!--fig\nstudy:run/commit-->x<!--/fig-->.\n", "Commit <!--fig study:run/commit-->x.\n",
                 "<!--begin study:table/all/lstm/S1/train-->\n\n| a |\n\n<!--end study:table/all/lstm/S1/forward-->\n"):
        assert any("not <!--" in p for p in df.render_page(page, renderer)[1]), page


def test_a_marker_shown_in_code_is_not_a_figure(renderer):
    page = ("Write `<!--fig KEY-->TEXT<!--/fig-->` or `<!--begin KEY-->`.\n\n```markdown\n"
            "<!--fig study:nothing-->1<!--/fig-->\n```\n")
    assert df.render_page(page, renderer) == (page, [])


def _readme_study_records(pattern) -> set[str]:
    """The results files of README.md's study figures (inline: df.FIG; tables: df.BLOCK)."""
    paths = set()
    for m in pattern.finditer((ROOT / "README.md").read_text()):
        key = m["key"]
        if key.startswith("study:"):
            paths.add(df.STUDY_RECORDS)
        elif key.startswith("study@"):
            path = key.split(":")[0].partition("@")[2]
            paths.add(path if path.endswith(".jsonl") else f"{path.rstrip('/')}/results.jsonl")
    return paths


def _protocol_problem(meta: dict, *, make_run: bool) -> str | None:
    """Why a run's records are not of today's protocol (or, `make_run`, not make run's answer profile)."""
    argv = meta.get("argv") or []
    profile = argv[argv.index("--profile") + 1] if "--profile" in argv else "answer"
    if not meta.get("processes"):
        return "made before the paired protocol (no processes per measurement)"
    if make_run and (profile != "answer" or any(a in argv for a in ("--impls", "--workloads", "--cells", "--threads"))):
        return f"not make run's answer profile ({' '.join(argv)})"
    return None


def _meta(path: str) -> dict:
    return json.loads((ROOT / path).read_text().splitlines()[0])


def test_the_readme_answers_from_one_current_make_run_record():
    """The README's table comes from one `make run` of today's protocol, and every study figure it
    quotes from a run of today's protocol."""
    tables = _readme_study_records(df.BLOCK)
    assert len(tables) == 1, f"the README's tables come from several runs: {sorted(tables)}"
    (table,) = tables
    assert _protocol_problem(_meta(table), make_run=True) is None, f"{table}: {_protocol_problem(_meta(table), make_run=True)}"
    for path in sorted(_readme_study_records(df.FIG)):
        assert _protocol_problem(_meta(path), make_run=False) is None, f"{path}: {_protocol_problem(_meta(path), make_run=False)}"


def test_the_protocol_check_can_fail():
    assert _protocol_problem({"argv": ["compare"], "repeats": 10}, make_run=False) == \
        "made before the paired protocol (no processes per measurement)"
    assert "not make run's answer profile" in _protocol_problem({"argv": ["compare", "--profile", "full"],
                                                                 "processes": 3}, make_run=True)
    assert _protocol_problem({"argv": ["compare", "--profile", "full"], "processes": 3}, make_run=False) is None
    assert _protocol_problem({"argv": ["compare", "--out", "x", "--no-progress"], "processes": 3}, make_run=True) is None
