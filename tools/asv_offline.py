"""Make a published asv site render without the internet: copy the vendored JavaScript and CSS
(benchmarks/vendor/, the npm packages at the versions asv's page names) into the site and point
its index.html at them instead of the CDNs.

    python -m tools.asv_offline .asv/html          (make bench / bench-publish run it)

Byte-identical to the CDN files (their integrity hashes are checked by the tests): jQuery
3.3.1, Bootstrap 3.1.1 (js, css), blueimp-md5 2.19.0, flot-orderbars 1.0.0.  From npm at the
same version, unminified where the CDN serves a minified build: flot 0.8.3 (+ time,
selection, categories).  stupidtable 1.0.1 is not on npm: stupid-table-plugin 1.1.3, the
same `$.fn.stupidtable` API, stands in.  A CDN reference this script does not know (a newer
asv) is an error, not a silently half-offline page.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "benchmarks" / "vendor"
LOCAL = {  # CDN URL in asv's index.html -> the vendored file, relative to the site
    "https://code.jquery.com/jquery-3.3.1.min.js": "vendor/js/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": "vendor/js/jquery.flot.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": "vendor/js/jquery.flot.time.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": "vendor/js/jquery.flot.selection.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js":
        "vendor/js/jquery.flot.categories.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": "vendor/js/jquery.flot.orderBars.js",
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": "vendor/js/stupidtable.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": "vendor/js/md5.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "vendor/js/bootstrap.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "vendor/css/bootstrap.min.css",
}
_TAG = re.compile(r'<(script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"[^>]*>')
_CHECKS = re.compile(r'\s+(integrity|crossorigin|referrerpolicy)="[^"]*"')


def rewrite(html: str) -> str:
    """index.html with every CDN script/stylesheet pointed at the vendored copy."""
    def local(match: re.Match) -> str:
        url = match.group(2)
        if url not in LOCAL:
            raise ValueError(f"asv's page loads {url}, which benchmarks/vendor does not hold: vendor it "
                             "(npm pack <package>@<version>) and add it to tools/asv_offline.py")
        return _CHECKS.sub("", match.group(0)).replace(url, LOCAL[url])
    return _TAG.sub(local, html)


def make_offline(site: Path) -> None:
    index = site / "index.html"
    if not index.exists():
        raise FileNotFoundError(f"{index} does not exist: run `asv publish` first (make bench-publish)")
    shutil.copytree(VENDOR, site / "vendor", dirs_exist_ok=True)
    index.write_text(rewrite(index.read_text()))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tools.asv_offline <asv html dir, e.g. .asv/html>")
    make_offline(Path(sys.argv[1]))
    print(f"{sys.argv[1]}: the page now loads its scripts from vendor/ (no internet needed)")
