"""The documentation stays true to the repository (fast; imports no framework).

- every relative link in README.md and docs/*.md points at a file or folder that exists
  (and, into a Markdown page, at one of its headings);
- every repository path written in inline code (or as a token of an inline command, or of
  a ```bash block) exists: a token with a `/`, or ending in .py/.md/.png/.json/.toml/
  .cfg/.txt/.sh; URLs, globs, placeholders (`<timestamp>`, `{k}`) and generated outputs
  (reports/, .asv/, .venv/) are not paths of the repository; a bare file name must exist
  somewhere in it;
- README.md stays a front door (at most 260 lines);
- docs/cells.md is exactly `rnnbench.core.catalogue.markdown_page()` (regenerate it with
  `python -m rnnbench.core.catalogue > docs/cells.md`);
- no relative path climbs out of the repository (a reader's clone has nothing beside it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import ROOT  # noqa: E402
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXTENSIONS = (".py", ".md", ".png", ".json", ".toml", ".cfg", ".txt", ".sh")
GENERATED = ("reports/", ".asv/", ".venv/", "~/")  # written by the tools, ignored by git
NOT_PATH_CHARS = set("<>{}*?()[]=:,|$'\"\\@")

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
EXTERNAL_LINK = re.compile(r"\[[^\]]*\]\((?:https?|mailto):[^)]*\)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def _ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


def _repo_names() -> tuple[set[str], set[str], list[Path]]:
    """(every file and folder name, every folder name, the top-level folders) of the repository."""
    skip = {".git", ".venv", ".asv", "reports", "__pycache__", ".pytest_cache", ".hypothesis", "node_modules"}
    names, folders = set(), set()
    for path in ROOT.rglob("*"):
        if not any(part in skip for part in path.relative_to(ROOT).parts):
            names.add(path.name)
            if path.is_dir():
                folders.add(path.name)
    tops = [p for p in ROOT.iterdir() if p.is_dir() and p.name not in skip]
    tops += [p for p in (ROOT / "rnnbench").rglob("*") if p.is_dir() and "__pycache__" not in p.parts]  # its packages
    return names, folders, tops


BASENAMES, FOLDERS, TOP_FOLDERS = _repo_names()


def _split_fences(text: str) -> tuple[str, list[str]]:
    """(the text without fenced blocks, the bodies of its ```bash / ```sh blocks)."""
    shell = [m.group(2) for m in FENCE.finditer(text) if m.group(1).strip() in ("bash", "sh", "shell", "console")]
    return FENCE.sub("", text), shell


def looks_like_path(token: str) -> bool:
    token = token.strip().rstrip(".;")
    if not token or token.startswith(("http://", "https://", "-", "#")) or "://" in token:
        return False
    if set(token) & NOT_PATH_CHARS or token.startswith(GENERATED) or token in GENERATED:
        return False
    if "/" in token:
        if token.startswith("../"):
            return True
        head = token.split("/", 1)[0]
        if not head or ("." in head.lstrip(".")):
            return False  # `nn.LSTM/nn.GRU`: a dotted first part is a Python name, not a folder
        # a file name with a known extension, a folder (trailing /), or under a folder of
        # this repository; `grad/x`, `n/s`, `1/2` are not paths
        return token.endswith(EXTENSIONS) or token.endswith("/") or head in FOLDERS
    return token.endswith(EXTENSIONS) and "." != token[0]


def path_exists(token: str, page: Path) -> bool:
    token = token.strip().rstrip(".;")
    if "/" not in token:
        return token in BASENAMES
    if token.startswith("../"):
        return False  # outside docs/ is fine only via the root; a path above the repository never is
    # from the root, from the page, or inside a package (`backends/bptt/steps.py` in a
    # table of rnnbench/torch/ and rnnbench/jax/, `vectors/` for rnnbench/vectors/)
    return any((base / token).exists() for base in (ROOT, page.parent, *TOP_FOLDERS))


def code_paths(text: str) -> list[str]:
    prose, shell_blocks = _split_fences(text)
    prose = EXTERNAL_LINK.sub("", prose)  # an external link's text names the other project's files
    tokens = []
    for m in INLINE_CODE.finditer(prose):
        tokens += m.group(2).split()
    for block in shell_blocks:
        for line in block.splitlines():
            tokens += line.split("#", 1)[0].split()
    return [t for t in tokens if looks_like_path(t)]


def test_pages_found():
    assert (ROOT / "README.md").exists() and len(PAGES) > 5


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_relative_links_exist(page):
    text = FENCE.sub("", page.read_text())
    missing = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.name}: links to missing files: {missing}"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_link_anchors_exist(page):
    text = FENCE.sub("", page.read_text())
    missing = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or "#" not in target:
            continue
        path, anchor = target.split("#", 1)
        other = (page.parent / path) if path else page
        if other.suffix == ".md" and other.exists() and anchor not in anchors(other):
            missing.append(target)
    assert not missing, f"{page.name}: links to missing headings: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_code_paths_exist(page):
    missing = sorted({t for t in code_paths(page.read_text()) if not path_exists(t, page)})
    assert not missing, f"{page.name}: paths in code that are not in the repository: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_no_outside_references(page):
    outside = [p for p in re.findall(r"(?:\.\./)+[\w.-][\w./-]*", page.read_text())
               if not (page.parent / p).resolve().is_relative_to(ROOT.resolve())]
    assert not outside, f"{page.name} points outside this repository: {outside}"


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines; move detail to docs/ (limit 260)"


def test_cells_page_is_generated_from_the_catalogue():
    from rnnbench.core.catalogue import markdown_page

    assert (ROOT / "docs" / "cells.md").read_text() == markdown_page(), (
        "docs/cells.md differs from the catalogue: regenerate it with `python -m rnnbench.core.catalogue > docs/cells.md`")


@pytest.mark.parametrize("token, expected", [
    ("rnnbench/core/catalogue.py", True), ("docs/study/", True), (".ci/run", True), ("cells.py", True),
    ("nn.LSTM/nn.GRU", False), ("reports/<timestamp>/", False), ("https://example.org/a.py", False),
    ("docs/*.md", False), (".asv/results/gpu-h200", False), ("weight_ih_l{k}", False), ("grad/x", False),
    ("n/s", False), ("1/2", False), ("sahred/cells.py", True), ("tests/peer/", True),
])
def test_path_heuristic(token, expected):
    assert looks_like_path(token) is expected
