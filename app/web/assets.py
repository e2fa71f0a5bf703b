"""Static files (the stylesheet, the script, the favicon and Plotly) served
from memory, gzip-compressed once, under versioned URLs.

A URL carries the first 12 hex digits of the file's SHA-256
(``/static/<hash>/app.css``), so a browser may keep it for a year: a changed
file gets a new URL. Pages link them relative to the app's ``root_path``, so
they work behind a reverse proxy under a prefix and under any host name.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request, Response

router = APIRouter(include_in_schema=False)

STATIC = Path(__file__).resolve().parents[2] / "static"

TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
FILES = ("app.css", "app.js", "favicon.svg")
IMMUTABLE = "public, max-age=31536000, immutable"


def plotly_path() -> Path:
    """plotly.min.js as shipped inside the installed plotly package: no CDN."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the plotly package is not installed")
    return Path(spec.origin).parent / "package_data" / "plotly.min.js"


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes
    version: str
    media_type: str


def _path(name: str) -> Path:
    return plotly_path() if name == "plotly.min.js" else STATIC / name


@cache
def asset(name: str) -> Asset:
    """One static file, read and compressed on first use (never at import)."""
    path = _path(name)
    body = path.read_bytes()
    return Asset(body, gzip.compress(body, 6, mtime=0), hashlib.sha256(body).hexdigest()[:12], TYPES[path.suffix])


@cache
def version(name: str) -> str:
    """A static file's version (``Asset.version``), read without compressing it: a page names Plotly
    (4.8 MB, 0.3-0.7 s to compress) long before a browser that lacks it asks for it."""
    return hashlib.sha256(_path(name).read_bytes()).hexdigest()[:12]


def static_url(root: str, name: str) -> str:
    """The versioned URL of a static file under the app's root path."""
    return f"{root}/static/{version(name)}/{name}"


def send(request: Request, body: bytes, gzipped: bytes | None, media_type: str, cache: str) -> Response:
    """``body``, gzip-compressed when the client accepts it and that is smaller."""
    headers = {"Cache-Control": cache, "Vary": "Accept-Encoding"}
    if gzipped is not None and len(gzipped) < len(body) and "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        body = gzipped
    return Response(body, media_type=media_type, headers=headers)


def _known(name: str) -> Asset | None:
    return asset(name) if name in FILES or name == "plotly.min.js" else None


@router.get("/static/{version}/{name}")
def versioned(request: Request, version: str, name: str) -> Response:
    """A static file; kept a year when the URL names its current version."""
    a = _known(name)
    if a is None:
        return Response("no such static file", status_code=404, media_type="text/plain")
    return send(request, a.body, a.gzipped, a.media_type, IMMUTABLE if version == a.version else "no-cache")


@router.get("/static/{name}")
def unversioned(request: Request, name: str) -> Response:
    """The same file under its plain name (for links made before versioning)."""
    return versioned(request, "", name)


@router.get("/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    return versioned(request, "", "plotly.min.js")


@router.get("/favicon.ico")
def favicon(request: Request) -> Response:
    """Browsers ask for /favicon.ico whatever the page links: the SVG icon."""
    return versioned(request, "", "favicon.svg")
