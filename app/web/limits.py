"""Request intake, decided before a body is read: the Host header, the token
of a write, the content type and the declared size; then the body is read
with a running bound, and JSON is decoded off the event loop after a scan
(at C speed) that bounds how many values it may build. The figures are
documented in docs/security.md."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.records import loads
from app.otlp.bounds import Refused as Refused  # the refusal of a request, web's or the OTLP intake's
from app.otlp.bounds import check_json_size

JSON = "application/json"
PROTOBUF = "application/x-protobuf"
OTLP_TYPES = (JSON, PROTOBUF)
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK = ("localhost", "127.0.0.1", "::1")
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; img-src 'self' data:; font-src 'self'; "
        # the app's stylesheet, and the two inline styles the vendored Plotly sets: a <style> element and
        # an empty style attribute (tests/web/test_browser.py fails on any style the policy blocks)
        b"style-src 'self' 'unsafe-hashes' 'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o=' "
        b"'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


def media_type(content_type: str) -> str:
    """``application/json; charset=utf-8`` -> ``application/json``."""
    return content_type.split(";")[0].strip().lower()


def _host_name(host: str) -> str:
    """``example.org:8000`` -> ``example.org``; ``[::1]:8000`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def allowed_hosts(configured: str, listen: str | None = None) -> frozenset[str]:
    """The Host names the app answers: the configured ones (comma-separated),
    or the loopback names plus the interface it listens on."""
    names = configured.split(",") if configured.strip() else [*LOOPBACK, *([listen] if listen else [])]
    return frozenset(_host_name(n) for n in names if n.strip())


def same_origin(request: Request) -> bool:
    """The browser says the request came from this site (Sec-Fetch-Site), or its
    Origin is this host; a request with neither header (curl) is no browser's."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return urlsplit(origin).netloc == host


class Intake:
    """The ASGI layer in front of the app: security headers on every answer;
    a Host not allowed is 400; a write without the token is 401, a body of
    the wrong type 415 and one declared too large 413, all before a byte of
    it is read; a body without a declared length is read up to the bound.
    ``guarded``: the path prefixes whose writes need the token and a JSON body
    (``/v1/traces``: an OTLP one); ``setting``: what the 413 names as the bound."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        token: str | None,
        hosts: frozenset[str],
        guarded: tuple[str, ...] = ("/api/", "/v1/traces"),
        setting: str = "TOOLLENS_MAX_BODY_BYTES",
    ):
        self.app, self.max_bytes, self.token, self.hosts, self.guarded = app, max_bytes, token, hosts, guarded
        self.setting = setting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name, value)
        try:
            self._check(scope, headers)
        except Refused as exc:
            await _refuse(send_secured, exc, bearer=exc.status == 401)
            return
        _clean_url(scope)
        if b"content-length" in headers or scope["method"] not in WRITES:
            await self.app(scope, receive, send_secured)
            return
        try:  # a streamed body: read it up to the bound, then replay it
            body = await _read_bounded(receive, self.max_bytes, self.setting)
        except Refused as exc:
            await _refuse(send_secured, exc)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send_secured)

    def _check(self, scope: Scope, headers: dict[bytes, bytes]) -> None:
        if "*" not in self.hosts:
            host = _host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self.hosts:
                raise Refused(400, f"Host {host[:100]!r} is not one this server answers (TOOLLENS_ALLOWED_HOSTS)")
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                raise Refused(400, "Content-Length is not a number") from None
            if size > self.max_bytes:
                raise Refused(413, f"request body larger than {self.max_bytes} bytes ({self.setting})")
        path: str = scope["path"]
        if scope["method"] not in WRITES or not path.startswith(self.guarded):
            return
        if self.token is not None:
            scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), self.token.encode()):
                raise Refused(401, "a bearer token is required for writes")
        has_body = (declared is None and b"transfer-encoding" in headers) or declared not in (None, b"0")
        kind = media_type(headers.get(b"content-type", b"").decode("latin-1"))
        if path == "/v1/traces" and kind not in OTLP_TYPES:
            raise Refused(415, f"an OTLP export is {JSON} or {PROTOBUF}, not {kind[:100]!r}")
        if path != "/v1/traces" and has_body and kind != JSON:
            raise Refused(415, f"the API takes {JSON} bodies, not {kind[:100]!r}")


def _clean_url(scope: Scope) -> None:
    """A NUL in the path or the query string reads as U+FFFD, as it is stored
    (docs/security.md): a filter finds what a write stored."""
    query: bytes = scope.get("query_string", b"")
    if b"%00" in query:
        scope["query_string"] = query.replace(b"%00", b"%EF%BF%BD")
    if "\x00" in scope["path"]:
        scope["path"] = scope["path"].replace("\x00", "\ufffd")
        scope["raw_path"] = scope["path"].encode("utf-8")


async def _read_bounded(receive: Receive, limit: int, setting: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"request body larger than {limit} bytes ({setting})")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _refuse(send: Send, exc: Refused, *, bearer: bool = False) -> None:
    body = json.dumps({"error": exc.error, "detail": []}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if bearer:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def read_json(body: bytes) -> Any:
    """A JSON body decoded (meant for a worker thread): bounded first, then read."""
    check_json_size(body)
    try:
        return loads(body)
    except ValueError as exc:
        raise Refused(400, f"the body is not valid JSON: {exc}") from None


class OffLoopJSON(APIRoute):
    """Routes whose JSON body is decoded in a worker thread: FastAPI then
    finds it decoded (``Request.json`` is cached) instead of decoding it on
    the event loop."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def route(request: Request) -> Response:
            body = await request.body()
            if body and media_type(request.headers.get("content-type", "")) == JSON:
                try:
                    request._json = await run_in_threadpool(read_json, body)
                except Refused as exc:
                    from app.web.errors import error_response

                    return error_response(exc.status, exc.error)
            return await handler(request)

        return route
