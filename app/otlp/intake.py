"""An OTLP/HTTP export request read into spans, in a worker thread and
bounded at each step before the next builds anything: the decompressed size,
the JSON values a body may build, the spans of one request. Each refusal is
a ``Refused`` (400 or 413) that names its limit (docs/security.md)."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

from app.core.records import loads
from app.otlp import wire as otlp_wire
from app.otlp.bounds import MAX_SPANS, Refused, check_json_size
from app.otlp.spans import (
    BATCH_GROUPED,
    BATCH_LINES,
    BATCH_PROTOBUF,
    SpanRef,
    grouped_batch,
    lines_batch,
    span_refs_from_protobuf,
    spans_from_json,
)


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body as sent, inflated (gzip, deflate) to ``limit`` bytes at most."""
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise Refused(400, f"unsupported Content-Encoding {encoding[:40]!r} (gzip, deflate)")
    d = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = d.decompress(body, limit + 1)  # zlib lets other threads run while it inflates
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise Refused(400, f"not an OTLP trace export: cannot decompress the body ({exc})") from None
    if len(out) > limit:
        raise Refused(413, f"decompressed body larger than {limit} bytes (TOOLLENS_MAX_BODY_BYTES)")
    return out


def _too_many(n: int) -> Refused:
    return Refused(413, f"the export request holds more than {MAX_SPANS} spans (the limit per request)")


def _json_span_count(request: Any) -> int:
    """The spans of a decoded JSON request, counted without reading them (0 for a shape that is not OTLP's)."""
    n = 0
    if isinstance(request, dict) and isinstance(request.get("resourceSpans"), list):
        for rs in request["resourceSpans"]:
            scopes = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") if isinstance(rs, dict) else None
            for ss in scopes if isinstance(scopes, list) else []:
                spans = ss.get("spans") if isinstance(ss, dict) else None
                n += len(spans) if isinstance(spans, list) else 0
    return n


def decode_export(
    body: bytes, encoding: str, protobuf: bool, limit: int, group_by: str | None = None
) -> tuple[str, bytes, list[SpanRef]]:
    """(staged form, staged body, span references) of an export request; Refused if it is refused.
    With ``group_by``, its spans are grouped by that conversation key (``grouped_batch``)."""
    body = decompress(body, encoding, limit)
    try:
        if protobuf:
            if otlp_wire.span_count(body, MAX_SPANS) > MAX_SPANS:
                raise _too_many(MAX_SPANS)
            if group_by:
                lines, refs = grouped_batch(body, True, group_by)
                return BATCH_GROUPED, lines, refs
            return BATCH_PROTOBUF, body, span_refs_from_protobuf(body)
        check_json_size(body, "the export request")
        request = loads(body) if body else {}
        if _json_span_count(request) > MAX_SPANS:
            raise _too_many(MAX_SPANS)
        if group_by:
            lines, refs = grouped_batch(body, False, group_by)
            return BATCH_GROUPED, lines, refs
        lines, refs = lines_batch(spans_from_json(request))
        return BATCH_LINES, lines, refs
    except (ValueError, TypeError) as exc:
        raise Refused(400, f"not an OTLP trace export: {exc}") from None
