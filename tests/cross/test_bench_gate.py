"""The asv gate (`make bench-compare`, scripts/bench_compare.sh) catches a planted regression.

In a throw-away clone: a commit that sleeps 20 ms in the eager rung's direction function
must be reported (exactly that benchmark slower) and fail the gate; a commit that changes
nothing measured must pass it; the history those runs recorded, published, renders in headless
Chromium with points from both commits (skipped where no browser or Playwright is installed).  asv builds its virtualenv from the pinned requirements in
the clone (pip's cache makes it a minute) and runs one benchmark per rung: about 3 minutes
in all, so this runs once, small.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("asv_browser", ROOT / "scripts" / "asv_browser.py")
asv_browser = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(asv_browser)
BENCH = r"RatioToNative.track_train_ratio\('torch.(eager|jit)', 'lstm', 'quick', 'float32'\)"

pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None,
                                reason="the gate benchmarks commits: needs git and this repository's history")


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=clone, check=True, capture_output=True, text=True).stdout


def _gate(clone: Path, base: str, head: str, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(home), BENCH=BENCH, ASV=f"{sys.executable} -m asv")
    return subprocess.run(["bash", "scripts/bench_compare.sh", base, head], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    path = tmp_path_factory.mktemp("gate") / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], check=True)
    _git(path, "config", "user.email", "gate@test")
    _git(path, "config", "user.name", "gate test")
    return path


def test_dirty_tree_and_unknown_revision_are_refused(clone, tmp_path):
    proc = _gate(clone, "no-such-rev", "HEAD", tmp_path)
    assert proc.returncode == 2 and "unknown revision 'no-such-rev'" in proc.stderr
    (clone / "README.md").write_text((clone / "README.md").read_text() + "\n")
    proc = _gate(clone, "HEAD~1", "HEAD", tmp_path)
    assert proc.returncode == 2 and "uncommitted changes" in proc.stderr
    _git(clone, "checkout", "README.md")


def test_the_gate_fails_on_a_planted_slowdown_and_passes_an_unchanged_commit(clone, tmp_path):
    base = _git(clone, "rev-parse", "HEAD").strip()
    eager = clone / "torch_impl" / "backends" / "eager.py"
    text = eager.read_text()
    start = text.index("def run_direction(")
    body = text.index(":\n", start) + 2
    eager.write_text(text[:body] + "    import time; time.sleep(0.02)  # planted slowdown\n" + text[body:])
    _git(clone, "commit", "-qam", "planted slowdown")
    slow = _gate(clone, base, "HEAD", tmp_path)
    out = slow.stdout + slow.stderr
    assert slow.returncode != 0, out
    changed = re.findall(r"^\|\s*\+\s*\|.*\| (rnn\.\S+\(.*\)) \|$", out, re.M)
    assert changed == ["rnn.RatioToNative.track_train_ratio('torch.eager', 'lstm', 'quick', 'float32')"], out
    assert "PERFORMANCE DECREASED" in out

    _git(clone, "reset", "-q", "--hard", base)
    (clone / "docs" / "asv.md").write_text((clone / "docs" / "asv.md").read_text() + "\n")
    _git(clone, "commit", "-qam", "a change nothing measures")
    same = _gate(clone, base, "HEAD", tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "PERFORMANCE DECREASED" not in same.stdout

    # the history these runs recorded, published offline and opened in a real browser: the
    # ratio's graph has points from both commits on main (the planted one was reset away)
    env = dict(os.environ, HOME=str(tmp_path))
    subprocess.run([sys.executable, "-m", "asv", "publish"], cwd=clone, env=env, check=True, capture_output=True,
                   timeout=300)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "asv_offline.py"), str(clone / ".asv" / "html")],
                   check=True, capture_output=True, timeout=120)
    why = asv_browser.missing()
    if why:
        pytest.skip(f"the site is published, but it cannot be opened here: {why}")
    got = asv_browser.check_site(clone / ".asv" / "html", "rnn.RatioToNative.track_train_ratio",
                                 screenshot=tmp_path / "asv-site.png")
    assert got["commits"] >= 2 and (tmp_path / "asv-site.png").stat().st_size > 10_000, got


def _plant(clone: Path, line: str, message: str) -> None:
    eager = clone / "torch_impl" / "backends" / "eager.py"
    text = eager.read_text()
    body = text.index(":\n", text.index("def run_direction(")) + 2
    eager.write_text(text[:body] + line + text[body:])
    _git(clone, "commit", "-qam", message)


def test_a_benchmark_that_crashes_at_base_is_reported_and_the_rest_are_compared(clone, tmp_path):
    _git(clone, "reset", "-q", "--hard", _git(clone, "rev-parse", "origin/HEAD").strip())
    _plant(clone, "    raise RuntimeError('planted crash')\n", "planted crash")
    crashed = _git(clone, "rev-parse", "HEAD").strip()
    _git(clone, "revert", "--no-edit", "HEAD")
    proc = _gate(clone, crashed, "HEAD", tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out  # jit compared and unchanged; eager not comparable, said
    assert "not compared (no result at BASE" in proc.stderr, out
    assert "rnn.RatioToNative.track_train_ratio('torch.eager', 'lstm', 'quick', 'float32')" in proc.stderr
    assert "track_train_ratio('torch.jit'" not in proc.stderr.split("not compared")[1]


def test_no_previous_results_is_an_error_that_says_what_to_do(clone, tmp_path):
    """asv stubbed out (ASV=true): only the script's reading of the recorded results runs."""
    for n in (1, 2):  # two commits no earlier test has results for
        _git(clone, "commit", "-q", "--allow-empty", "-m", f"empty {n}")
    base, head = (_git(clone, "rev-parse", r).strip() for r in ("HEAD~1", "HEAD"))
    results = clone / ".asv" / "results" / "box"
    results.mkdir(parents=True, exist_ok=True)
    entry = lambda v: {"results": {"rnn.RatioToNative.track_train_ratio": [[v], [["'torch.eager'"]]]}}  # noqa: E731
    (results / f"{base[:8]}-env.json").write_text(json.dumps(entry(None)))
    (results / f"{head[:8]}-env.json").write_text(json.dumps(entry(2.5)))
    env = dict(os.environ, HOME=str(tmp_path), ASV="true")
    proc = subprocess.run(["bash", "scripts/bench_compare.sh", base, head], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no previous results" in proc.stderr and "choose a BASE where they run" in proc.stderr
    assert "no result at BASE: rnn.RatioToNative.track_train_ratio('torch.eager')" in proc.stderr
