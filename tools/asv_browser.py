"""Open a published asv site in headless Chromium and check that a benchmark's graph renders.

    python -m tools.asv_browser .asv/html [--bench rnn.RatioToNative.track_train_ratio]
                                            [--screenshot docs/asv-site.png]

Serves the site on localhost (asv's page loads its graphs with XHR, which a file:// page may
not), opens the benchmark's graph with Playwright driving the system's Chromium (Debian's
`chromium` package; Playwright's own browser download is not used), waits for flot to draw,
and reads the plotted series back from the page: it fails unless some series has points from
at least two commits.  Exit status 0 and a one-line summary on success; 1 with the reason
otherwise; 2 when no browser or no Playwright is installed.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# As root, in a closed network: no sandbox, and none of Chromium's background connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# flot keeps its plot object on the placeholder; each series' data is [[x, y], ...]
READ_PLOT = """() => {
    const plot = window.$ && $('#main-graph').data('plot');
    if (!plot) return null;
    return plot.getData().map(s => s.data.filter(p => p && p[1] !== null && p[1] !== undefined).map(p => p[0]));
}"""


def find_browser() -> str | None:
    """The system Chromium's path, or None."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def missing() -> str | None:
    """Why the check cannot run here (no browser, no Playwright), or None."""
    if find_browser() is None:
        return f"no Chromium on PATH (looked for {', '.join(BROWSERS)}; Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install playwright; the system Chromium is used)"
    return None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def check_site(html_dir: Path, bench: str, screenshot: Path | None = None, min_commits: int = 2,
               timeout_ms: int = 30_000, min_drawn: int = 1) -> dict:
    """Open `bench`'s graph; return {"series": n, "drawn": series with a point, "commits": most
    distinct x of one series, "errors": page errors}; raise AssertionError when fewer than
    `min_commits` are drawn.

    asv fetches each series' graph file with its own request and redraws as each arrives, so the
    page is read only once `min_drawn` series have points (or `timeout_ms` has passed): reading at
    the first drawn series would race the others' requests."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(html_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/index.html#{bench}"
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=find_browser(), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(url)
                try:
                    page.wait_for_function(f"() => {{ const s = ({READ_PLOT})(); "
                                           f"return s && s.filter(x => x.length > 0).length >= {int(min_drawn)}; }}",
                                           timeout=timeout_ms)
                except PlaywrightTimeout:
                    pass  # read what is drawn; the assertions below say what is missing
                series = page.evaluate(READ_PLOT)
                if screenshot:
                    Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(screenshot))
                text = page.inner_text("body")
            finally:
                browser.close()
    finally:
        server.shutdown()
    series = series or []
    commits = max((len(set(xs)) for xs in series), default=0)
    assert "failed to load" not in text, f"the page says its dependencies failed to load: {text[:300]}"
    assert commits >= min_commits, (f"{bench}: the graph has {len(series)} series, the fullest with points "
                                    f"from {commits} commit(s); expected at least {min_commits}")
    return {"series": len(series), "drawn": sum(1 for xs in series if xs), "commits": commits, "errors": errors}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html_dir", type=Path, help="the published site (asv publish; .asv/html)")
    ap.add_argument("--bench", default="rnn.RatioToNative.track_train_ratio", help="benchmark whose graph to open")
    ap.add_argument("--screenshot", type=Path, default=None, help="save a PNG of the page")
    ap.add_argument("--min-commits", type=int, default=2)
    args = ap.parse_args(argv)
    why = missing()
    if why:
        print(f"asv_browser: {why}", file=sys.stderr)
        return 2
    if not (args.html_dir / "index.html").is_file():
        print(f"asv_browser: {args.html_dir}/index.html does not exist: run asv publish first", file=sys.stderr)
        return 1
    try:
        got = check_site(args.html_dir, args.bench, args.screenshot, args.min_commits)
    except AssertionError as e:
        print(f"asv_browser: {e}", file=sys.stderr)
        return 1
    print(f"asv_browser: {args.bench}: {got['series']} series drawn, the fullest from {got['commits']} commits"
          + (f"; screenshot {args.screenshot}" if args.screenshot else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
