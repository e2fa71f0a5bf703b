"""Screenshots for the README (docs/img/run.png, docs/img/timeline.png), from the demo's runs.

    .venv/bin/python scripts/screenshots.py      # needs Chromium (TOOLLENS_CHROMIUM, default /usr/bin/chromium)

Records the demo runs into a temporary SQLite file, serves them, and shows the
v1 run's page and the timeline of a trajectory whose injected fault was met with
an invented answer, in a 1280-pixel-wide window. Run it again when a page changes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
CHROMIUM = os.environ.get("TOOLLENS_CHROMIUM", "/usr/bin/chromium")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "demo", "--db", f"{tmp}/demo.db", "--port", str(port)], cwd=ROOT
        )
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    runs = httpx.get(f"{base}/api/runs", timeout=5).json()
                    break
                except httpx.TransportError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("the demo did not serve") from None
                    time.sleep(0.3)
            run = next(r for r in runs["data"] if r["name"] == "banca-v1-simulado")
            trajs = httpx.get(
                f"{base}/api/runs/{run['id']}/trajectories", params={"outcome": "hallucinated"}, timeout=10
            ).json()
            # an invented answer after an *injected* fault (others follow a schema refusal or an unknown tool)
            items = [t for t in trajs["data"] if (t.get("fault") or {}).get("source") == "injected"]
            OUT.mkdir(parents=True, exist_ok=True)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{base}/runs/{run['id']}", wait_until="networkidle")
                page.screenshot(path=str(OUT / "run.png"))
                page.goto(f"{base}/trajectories/{items[0]['id']}", wait_until="networkidle")
                page.screenshot(path=str(OUT / "timeline.png"))
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"wrote {OUT / 'run.png'} and {OUT / 'timeline.png'}")


if __name__ == "__main__":
    main()
