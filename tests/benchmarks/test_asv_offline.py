"""The published asv site needs no internet: every script and stylesheet is vendored, and
the vendored files asv's page pins by hash are byte-identical to the CDN's."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from tests.support import ROOT  # noqa: E402
from tools import asv_offline  # noqa: E402
asv = pytest.importorskip("asv")
WWW = Path(asv.__file__).parent / "www"


def test_the_published_page_loads_nothing_from_the_internet(tmp_path):
    shutil.copytree(WWW, tmp_path / "html")
    original = (WWW / "index.html").read_text()
    asv_offline.make_offline(tmp_path / "html")
    page = (tmp_path / "html" / "index.html").read_text()
    refs = re.findall(r'<script\b[^>]*?src="([^"]+)"', page) + re.findall(r'<link\b[^>]*?href="([^"]+\.css)"', page)
    assert refs and not [r for r in refs if r.startswith(("http://", "https://", "//"))], refs
    for ref in refs:
        assert (tmp_path / "html" / ref).is_file(), ref
    assert (tmp_path / "html" / "vendor" / "fonts" / "glyphicons-halflings-regular.woff").is_file()
    # the identical-bytes files: the page's own integrity hashes hold for the vendored copies
    pinned = re.findall(r'(?:src|href)="(https://[^"]+)" integrity="(sha(?:256|512))-([^"]+)"', original)
    identical = {"jquery-3.3.1", "bootstrap@3.1.1", "blueimp-md5", "flot-orderbars"}
    checked = 0
    for url, algo, digest in pinned:
        if any(name in url for name in identical):
            data = (tmp_path / "html" / asv_offline.LOCAL[url]).read_bytes()
            assert base64.b64encode(hashlib.new(algo, data).digest()).decode() == digest, url
            checked += 1
    assert checked == 5


def test_an_unknown_cdn_reference_is_an_error():
    with pytest.raises(ValueError, match="benchmarks/vendor does not hold"):
        asv_offline.rewrite('<script src="https://cdn.example.org/new-lib.js"></script>')
