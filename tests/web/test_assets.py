"""Static files and links over real HTTP: Plotly only where a chart is drawn,
compressed versioned files kept a year, links under a root_path prefix."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.web.app import create_app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HTML = {"accept": "text/html"}
LINK = re.compile(r'(?:href|src|action)="([^"]*)"')


def load_examples(c: TestClient) -> None:
    for version in ("v1", "v2"):
        doc = load_suite_document(EXAMPLES / f"suite_{version}.yaml")
        rid = c.post("/api/runs", json={"name": f"banca-{version}", "suite": doc}).json()["id"]
        recs = [json.loads(x) for x in (EXAMPLES / f"trajectories_{version}.jsonl").read_text().splitlines()]
        assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}"))) as c:
        load_examples(c)
        yield c


def scripts(text: str) -> list[str]:
    """The scripts a page loads: at once, or (Plotly) once it has loaded."""
    return re.findall(r'<script src="([^"]+)"', text) + re.findall(r'<meta name="plotly" content="([^"]+)"', text)


def test_plotly_only_on_pages_that_draw_a_chart(client: TestClient) -> None:
    for path in ("/", "/trajectories/1", "/toolsets/atencion_cliente", "/compare/trajectories?a=1&b=40"):
        text = client.get(path, headers=HTML).text
        assert not any("plotly" in s for s in scripts(text)), path
    for path in ("/runs/1", "/compare?a=1&b=2"):
        assert sum("plotly" in s for s in scripts(client.get(path, headers=HTML).text)) == 1, path


def test_static_files_are_versioned_compressed_and_kept_a_year(client: TestClient) -> None:
    text = client.get("/runs/1", headers=HTML).text
    css = re.search(r'<link rel="stylesheet" href="([^"]+)"', text)
    assert css is not None
    body = (ROOT / "static" / "app.css").read_bytes()
    assert css.group(1) == f"/static/{hashlib.sha256(body).hexdigest()[:12]}/app.css"
    for url in [css.group(1), *scripts(text)]:
        r = client.get(url, headers={"accept-encoding": "gzip, br"})
        assert r.status_code == 200, url
        assert r.headers["content-encoding"] == "gzip"
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    plotly = next(s for s in scripts(text) if "plotly" in s)
    r = client.get(plotly, headers={"accept-encoding": "gzip"})
    assert r.num_bytes_downloaded < len(r.content) / 2  # on the wire: well under half the 4.8 MB file
    # an old version of a URL is not cached for a year; an unknown file is a 404
    assert client.get("/static/000000000000/app.css").headers["cache-control"] == "no-cache"
    assert client.get("/static/x/secret.txt").status_code == 404
    assert client.get("/static/x/..%2Fpyproject.toml").status_code == 404
    # without Accept-Encoding: plain bytes
    r = client.get(css.group(1), headers={"accept-encoding": "identity"})
    assert "content-encoding" not in r.headers and r.content == body


def test_pages_are_compressed(client: TestClient) -> None:
    r = client.get("/runs/1", headers={**HTML, "accept-encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip" and "<h1>" in r.text


def test_favicon(client: TestClient) -> None:
    assert client.get("/favicon.ico").headers["content-type"] == "image/svg+xml"
    assert 'rel="icon"' in client.get("/", headers=HTML).text


def test_links_start_with_the_root_path_and_name_no_host(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(database_url=f"sqlite:///{tmp_path / 'r.db'}")), root_path="/tl") as c:
        load_examples(c)
        for path in (
            "/",
            "/runs/1",
            "/trajectories/1",
            "/compare?a=1&b=2",
            "/toolsets/atencion_cliente",
            "/compare/trajectories?a=1&b=40",
            "/runs/999",
        ):
            text = c.get(path, headers=HTML).text
            links = LINK.findall(text)
            assert links, path
            for link in links:
                assert link.startswith(("/tl/", "#", "?")), (path, link)
                assert "testserver" not in link and "://" not in link, (path, link)
            for s in scripts(text):
                assert c.get(s).status_code == 200, s
