"""First-load benchmark of the dashboard in a real browser: the demo's runs
list, a run page, a trajectory page and the compare page, each opened in a
fresh browser profile (empty cache) by Playwright driving Chromium against a
real ``toollens serve`` process. Prints, per page, the median time to the
``load`` event, to DOMContentLoaded and until the charts are drawn (Plotly
is fetched after ``load``) over several runs, and the bytes transferred (HTML
plus every file the page fetched, charts included, as sent on the wire).

Usage::

    python bench/pages_load.py               # the demo database, 7 runs per page
    python bench/pages_load.py --runs 15 --db demo.db
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("TOOLLENS_CHROMIUM", "/usr/bin/chromium")
TOOLLENS = Path(sys.executable).parent / "toollens"

MEASURE = """() => {
    const nav = performance.getEntriesByType('navigation')[0];
    const res = performance.getEntriesByType('resource');
    return {load: nav.loadEventEnd, dom: nav.domContentLoadedEventEnd,
            bytes: nav.transferSize + res.reduce((n, r) => n + r.transferSize, 0),
            files: res.length + 1};
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(db: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(TOOLLENS), "serve", "--db", f"sqlite:///{db.resolve()}", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/api/runs", timeout=2).read()
            return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("toollens serve did not start")


def pages(base: str) -> dict[str, str]:
    import json

    runs = json.loads(urllib.request.urlopen(base + "/api/runs").read())["data"]
    by_name = {r["name"]: r["id"] for r in runs}
    v1, v2 = by_name.get("banca-v1-simulado", runs[-1]["id"]), by_name.get("banca-v2-simulado", runs[0]["id"])
    failing = json.loads(urllib.request.urlopen(f"{base}/api/runs/{v1}/trajectories?passed=false&limit=1").read())
    tid = failing["data"][0]["id"]
    return {
        "runs list": "/",
        "run page": f"/runs/{v1}",
        "trajectory page": f"/trajectories/{tid}",
        "compare page": f"/compare?a={v1}&b={v2}",
    }


def measure(browser: Any, url: str, runs: int) -> dict[str, float]:
    loads, doms, sizes, files, charts = [], [], [], [], []  # type: ignore[var-annotated]
    for _ in range(runs):
        context = browser.new_context(viewport={"width": 1400, "height": 900})  # a fresh profile: empty cache
        page = context.new_page()
        page.goto(url, wait_until="load")
        m = page.evaluate(MEASURE)
        loads.append(m["load"])
        doms.append(m["dom"])
        # the charts (Plotly comes after load): drawn, and their bytes counted
        page.wait_for_function(
            "() => [...document.querySelectorAll('.plot')].every(d => d.dataset.rendered)", timeout=60_000
        )
        charts.append(page.evaluate("() => performance.now()") if page.locator(".plot").count() else 0.0)
        page.wait_for_load_state("networkidle")
        m = page.evaluate(MEASURE)
        sizes.append(m["bytes"])
        files.append(m["files"])
        context.close()
    return {
        "load_ms": statistics.median(loads),
        "dom_ms": statistics.median(doms),
        "charts_ms": statistics.median(charts),
        "kb": statistics.median(sizes) / 1024,
        "files": statistics.median(files),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh-profile loads per page (the median is printed)")
    parser.add_argument("--db", type=Path, default=None, help="an existing demo database (default: record one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if db is None:
            db = Path(tmp) / "demo.db"
            subprocess.run(
                [str(TOOLLENS), "demo", "--db", str(db), "--no-serve"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        proc, base = serve(db)
        try:
            targets = pages(base)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
                )
                for url in targets.values():  # the server's first render of each page is not the browser's cost
                    urllib.request.urlopen(base + url).read()
                print(
                    f"{'page':<16} {'load (median)':>14} {'DOMContentLoaded':>17} {'charts drawn':>13} "
                    f"{'transferred':>12} {'files':>6}"
                )
                for name, url in targets.items():
                    m = measure(browser, base + url, args.runs)
                    charts = f"{m['charts_ms']:>10.0f} ms" if m["charts_ms"] else f"{'no chart':>13}"
                    print(
                        f"{name:<16} {m['load_ms']:>11.0f} ms {m['dom_ms']:>14.0f} ms {charts} {m['kb']:>9.0f} KB "
                        f"{m['files']:>6.0f}"
                    )
                browser.close()
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
