"""The OTLP span model and its decoders: a span as a trajectory needs it, read from OTLP/JSON
requests and protobuf bodies, and as the live receiver stages, buffers and reads it back
(batches, references into them, conversation grouping). ``app.importers.otel`` turns spans
into trajectory records; ``app.otlp.wire`` reads protobuf bodies fast; ``app.otlp.span`` holds
the span itself (both read it).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from app.core.keys import whole_key
from app.core.records import MAX_NAME, loads
from app.otlp.span import STATUS_ERROR as STATUS_ERROR  # the span model, read here by its decoders' users
from app.otlp.span import Span as Span


def span_to_json(span: Span) -> str:
    """A span as compact JSON text (what the receiver stages)."""
    fields = [
        span.trace_id,
        span.span_id,
        span.parent_id,
        span.name,
        span.start,
        span.end,
        span.attributes,
        span.status_code,
        span.status_message,
        span.events,
    ]
    try:
        return orjson.dumps(fields).decode("utf-8")
    except TypeError:  # integers beyond 64 bits
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


def span_from_json(text: str) -> Span:
    t, s, p, name, start, end, attributes, code, message, events = loads(text)
    return Span(t, s, p, name, start, end, attributes, code, message, [(e[0], e[1]) for e in events])


PROTOBUF_TEXT = "pb:"  # a staged span in protobuf, base64: "pb:" + base64(Span.SerializeToString())

# What the live receiver stages, one row per export request (a "batch"), decoded
# only when its traces are scored (by the receiver's worker process, as a rule):
BATCH_PROTOBUF = "pb"  # the protobuf export request as it came (decompressed)
BATCH_LINES = "lines"  # staged span texts, one per line: ``span_to_json``, or ``PROTOBUF_TEXT`` + base64
# the same, of a request grouped by conversation (``grouped_batch``): read back, none of its spans
# is a root, so that a conversation a restart interrupted waits ``idle`` and goes on as one trajectory
BATCH_GROUPED = "grouped"


@dataclass(slots=True)
class SpanRef:
    """A span as the live receiver buffers it: the ids it is grouped and
    recognised by, and where it is staged (its batch, its position there)."""

    trace_id: str
    span_id: str
    is_root: bool
    index: int
    batch: int = 0  # the staged batch's id, once staged
    tool: bool = False  # a tool span: one call of the trajectory (the receiver bounds them per trace)


_TOOL_MARKS = {
    "gen_ai.operation.name": "execute_tool",
    "openinference.span.kind": "TOOL",
    "traceloop.span.kind": "tool",
}  # what ``is_tool_span`` reads


def _pb_is_tool(s: Any) -> bool:
    """``is_tool_span`` of a protobuf ``Span``, without building its attributes."""
    return s.name.startswith("execute_tool") or any(
        kv.key in _TOOL_MARKS and kv.value.string_value == _TOOL_MARKS[kv.key] for kv in s.attributes
    )


def span_refs_from_protobuf(body: bytes) -> list[SpanRef]:
    """The spans of a protobuf export request, as references into it (ValueError if it is not one)."""
    from app.otlp import wire as otlp_wire

    spans = _pb_spans(body)
    try:
        tools = otlp_wire.tool_spans(body)  # about as fast as reading the ids: the attributes are not built
    except ValueError:
        tools = []
    if len(tools) != len(spans):
        tools = [_pb_is_tool(s) for s in spans]
    return [
        SpanRef(s.trace_id.hex(), s.span_id.hex(), not s.parent_span_id, i, 0, tool)
        for i, (s, tool) in enumerate(zip(spans, tools, strict=True))
    ]


def lines_batch(spans: list[Span]) -> tuple[bytes, list[SpanRef]]:
    """Spans (from an OTLP/JSON request) as a ``BATCH_LINES`` body, and references into it."""
    body = "\n".join(span_to_json(s) for s in spans).encode("utf-8")
    return body, [SpanRef(s.trace_id, s.span_id, s.is_root, i, 0, is_tool_span(s)) for i, s in enumerate(spans)]


def batch_refs(form: str, body: bytes) -> list[SpanRef]:
    """The references of a staged batch read back (after a restart); ValueError if unreadable."""
    if form == BATCH_PROTOBUF:
        return span_refs_from_protobuf(body)
    rooted = form != BATCH_GROUPED
    return [
        SpanRef(s.trace_id, s.span_id, rooted and s.is_root, i, 0, is_tool_span(s))
        for i, s in _batch_spans(form, body, None).items()
    ]


def _batch_spans(form: str, body: bytes, wanted: set[int] | None) -> dict[int, Span]:
    """The spans of a staged batch at the ``wanted`` positions (all with None)."""
    found: list[Any]
    decode: Callable[[Any], Span]
    if form == BATCH_PROTOBUF:
        from app.otlp import wire as otlp_wire

        if otlp_wire.usable():
            try:
                return otlp_wire.wire_spans(body, wanted)  # about twice as fast as the protobuf runtime
            except ValueError:  # not readable that way: the runtime decides (and says why)
                pass
        found, decode = _pb_spans(body), _span_from_pb
    elif form in (BATCH_LINES, BATCH_GROUPED):
        try:
            found, decode = list(body.decode("utf-8").split("\n")), span_from_staged
        except UnicodeDecodeError as exc:
            raise ValueError(f"not a staged batch ({exc})") from None
    else:
        raise ValueError(f"unknown staged batch format {form!r}")
    return {i: decode(found[i]) for i in (range(len(found)) if wanted is None else wanted) if i < len(found)}


def spans_of(batches: Mapping[int, tuple[str, bytes]], traces: list[list[tuple[int, int]]]) -> list[list[Span] | str]:
    """Per trace, its spans (given as (batch, position) in the staged ``batches``), or why
    they cannot be read. Each batch is decoded once, only at the positions asked for."""
    wanted: dict[int, set[int]] = {}
    for refs in traces:
        for b, i in refs:
            wanted.setdefault(b, set()).add(i)
    decoded: dict[int, dict[int, Span] | str] = {}
    for b, positions in wanted.items():
        try:
            form, body = batches[b]
            decoded[b] = _batch_spans(form, body, positions)
        except (KeyError, ValueError) as exc:
            decoded[b] = f"staged batch {b} cannot be read ({exc})"
    out: list[list[Span] | str] = []
    for refs in traces:
        spans: list[Span] = []
        error = ""
        for b, i in refs:
            got = decoded[b]
            if isinstance(got, str):
                error = got
                break
            span = got.get(i)
            if span is None:
                error = f"staged batch {b} has no span {i}"
                break
            spans.append(span)
        out.append(error or spans)
    return out


def span_from_staged(text: str) -> Span:
    """The span one line of a ``BATCH_LINES`` batch holds; ValueError if it is not one."""
    if not text.startswith(PROTOBUF_TEXT):
        try:
            return span_from_json(text)
        except (TypeError, IndexError) as exc:
            raise ValueError(f"not a staged span ({exc})") from None
    pb_span, decode_error = _protobuf_span()
    try:
        return _span_from_pb(pb_span.FromString(binascii.a2b_base64(text[len(PROTOBUF_TEXT) :])))
    except (decode_error, binascii.Error) as exc:
        raise ValueError(f"not a staged protobuf span ({exc})") from None


@functools.cache
def _protobuf_span() -> tuple[Any, type[Exception]]:
    """The protobuf ``Span`` class and its decoding error (imported on first use)."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

    return PbSpan, DecodeError


# -- reading OTLP ------------------------------------------------------------


def _hex_id(raw: Any) -> str:
    """OTLP/JSON ids are hex; protobuf's JSON mapping writes base64: accept both."""
    if not isinstance(raw, str) or not raw:
        return ""
    try:
        int(raw, 16)
        return raw.lower()
    except ValueError:
        try:
            return base64.b64decode(raw, validate=True).hex()
        except ValueError:
            return raw


def _json_value(v: Any, path: str) -> Any:
    if not isinstance(v, Mapping):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]
    if "doubleValue" in v:
        return v["doubleValue"]
    if "boolValue" in v:
        return v["boolValue"]
    if "arrayValue" in v:
        values = _list(_object(v["arrayValue"], f"{path}.arrayValue").get("values"), f"{path}.arrayValue.values")
        return [_json_value(x, f"{path}.arrayValue.values[{i}]") for i, x in enumerate(values)]
    if "kvlistValue" in v:
        kv = _object(v["kvlistValue"], f"{path}.kvlistValue")
        return _json_attributes(kv.get("values"), f"{path}.kvlistValue.values")
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def _object(raw: Any, path: str) -> Mapping[str, Any]:
    """An OTLP/JSON message: an object, or absent (null)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: expected an object, got {type(raw).__name__}")
    return raw


def _list(raw: Any, path: str) -> list[Any]:
    """A repeated OTLP/JSON field: a list, or absent (null)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list, got {type(raw).__name__}")
    return raw


def _int(raw: Any, path: str) -> int:
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"{path}: expected an integer (or a decimal string), got {type(raw).__name__}")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{path}: not an integer: {str(raw)[:40]!r}") from None


def _json_attributes(items: Any, path: str = "attributes") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, kv in enumerate(_list(items, path)):
        kv = _object(kv, f"{path}[{i}]")
        if isinstance(kv.get("key"), str):
            out[kv["key"]] = _json_value(kv.get("value"), f"{path}[{i}].value")
    return out


def _json_events(raw: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for n, e in enumerate(_list(raw, path)):
        event = _object(e, f"{path}[{n}]")
        out.append((str(event.get("name") or ""), _json_attributes(event.get("attributes"), f"{path}[{n}].attributes")))
    return out


def _status_code(raw: Any) -> int:
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        return {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(raw, 0)
    return 0


def spans_from_json(request: Any, group_by: str | None = None) -> list[Span]:
    """The spans of an OTLP/JSON export request (``{"resourceSpans": [...]}``;
    an empty request ``{}`` has none). A wrong shape raises ValueError naming
    the place, e.g. ``resourceSpans[0].scopeSpans[1]: expected an object``.
    With ``group_by``, spans are grouped by that conversation key (``regroup``)."""
    if not group_by:
        return [s for s, _ in json_keyed(request, None)]
    keyed = json_keyed(request, group_by)
    regroup(keyed, group_by)
    return [s for s, _ in keyed]


def json_keyed(request: Any, key: str | None) -> list[tuple[Span, Any]]:
    """The spans of an OTLP/JSON request, each with its resource's attribute ``key``."""
    if not isinstance(request, Mapping):
        raise ValueError(f"an OTLP JSON export request is an object with 'resourceSpans', got {type(request).__name__}")
    out: list[Span] = []
    keyed: list[tuple[Span, Any]] = []
    for i, rs in enumerate(_list(request.get("resourceSpans"), "resourceSpans")):
        p = f"resourceSpans[{i}]"
        rs = _object(rs, p)
        first = len(out)
        scope_key = "scopeSpans" if rs.get("scopeSpans") is not None else "instrumentationLibrarySpans"
        for j, ss in enumerate(_list(rs.get(scope_key), f"{p}.{scope_key}")):
            q = f"{p}.{scope_key}[{j}]"
            for k, s in enumerate(_list(_object(ss, q).get("spans"), f"{q}.spans")):
                r = f"{q}.spans[{k}]"
                s = _object(s, r)
                status = _object(s.get("status"), f"{r}.status")
                out.append(
                    Span(
                        trace_id=_hex_id(s.get("traceId")),
                        span_id=_hex_id(s.get("spanId")),
                        parent_id=_hex_id(s.get("parentSpanId")),
                        name=str(s.get("name") or ""),
                        start=_int(s.get("startTimeUnixNano"), f"{r}.startTimeUnixNano"),
                        end=_int(s.get("endTimeUnixNano"), f"{r}.endTimeUnixNano"),
                        attributes=_json_attributes(s.get("attributes"), f"{r}.attributes"),
                        status_code=_status_code(status.get("code")),
                        status_message=str(status.get("message") or ""),
                        events=_json_events(s.get("events"), f"{r}.events"),
                    )
                )
        value = None
        if key:
            value = _json_attributes(
                _object(rs.get("resource"), f"{p}.resource").get("attributes"), f"{p}.resource.attributes"
            ).get(key)
        keyed.extend((span, value) for span in out[first:])
    return keyed


_PB_SCALARS = frozenset(("string_value", "int_value", "double_value", "bool_value"))


def _pb_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind in _PB_SCALARS:
        return getattr(v, kind)
    if kind == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return None


def _export_request(body: bytes) -> Any:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise ValueError(f"not an OTLP protobuf export request ({exc})") from None
    return request


def _span_from_pb(s: Any) -> Span:
    return Span(
        s.trace_id.hex(),
        s.span_id.hex(),
        s.parent_span_id.hex(),
        s.name,
        s.start_time_unix_nano,
        s.end_time_unix_nano,
        {kv.key: _pb_value(kv.value) for kv in s.attributes},
        s.status.code,
        s.status.message,
        [(e.name, {kv.key: _pb_value(kv.value) for kv in e.attributes}) for e in s.events] if s.events else [],
    )


def _pb_spans(body: bytes) -> list[Any]:
    """The protobuf ``Span`` messages of an export request, in order (ValueError if it is not one)."""
    return [s for rs in _export_request(body).resource_spans for ss in rs.scope_spans for s in ss.spans]


def spans_from_protobuf(body: bytes, group_by: str | None = None) -> list[Span]:
    """The spans of an OTLP/HTTP protobuf ``ExportTraceServiceRequest`` (grouped by a
    conversation key with ``group_by``)."""
    if not group_by:
        return [_span_from_pb(s) for s in _pb_spans(body)]
    keyed = _pb_keyed(body, group_by)
    regroup(keyed, group_by)
    return [s for s, _ in keyed]


def _pb_keyed(body: bytes, key: str) -> list[tuple[Span, Any]]:
    """The spans of a protobuf export request, each with its resource's attribute ``key``."""
    keyed: list[tuple[Span, Any]] = []
    for rs in _export_request(body).resource_spans:
        value = next((_pb_value(kv.value) for kv in rs.resource.attributes if kv.key == key), None)
        keyed.extend((_span_from_pb(s), value) for ss in rs.scope_spans for s in ss.spans)
    return keyed


# -- one trajectory per conversation -------------------------------------------------


def _key_value(value: Any) -> str:
    """A conversation value as a trace key, compared whole (``whole_key``: a long one hashed,
    an integer told from the same digits as a string); "" for no value, or one of another type."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        return ""
    return whole_key(value, MAX_NAME)


def regroup(keyed: list[tuple[Span, Any]], key: str) -> set[str]:
    """Spans of several traces that share a conversation key, one group: a span's
    trace id becomes the value of its attribute ``key`` (else its resource's, given
    beside it; else that of another span of its trace in the same request). Spans
    without one keep their trace. Returns the conversation values."""
    values = [_key_value(span.attributes.get(key, resource)) for span, resource in keyed]
    of_trace: dict[str, str] = {}
    for (span, _), value in zip(keyed, values, strict=True):
        if value:
            of_trace.setdefault(span.trace_id, value)
    for (span, _), value in zip(keyed, values, strict=True):
        span.trace_id = value or of_trace.get(span.trace_id, span.trace_id)
    return set(of_trace.values())


def grouped_batch(body: bytes, protobuf: bool, key: str) -> tuple[bytes, list[SpanRef]]:
    """An export request whose spans are grouped by the conversation ``key``, as a
    ``BATCH_GROUPED`` body (the group is staged with each span, so a restart groups
    them alike) and references into it. A conversation has no one root: it is
    complete once nothing came for it for the receiver's ``idle`` time."""
    keyed = _pb_keyed(body, key) if protobuf else json_keyed(loads(body) if body else {}, key)
    conversations = regroup(keyed, key)
    data, refs = lines_batch([s for s, _ in keyed])
    for ref in refs:
        ref.is_root = ref.is_root and ref.trace_id not in conversations
    return data, refs


def is_tool_span(span: Span) -> bool:
    a = span.attributes
    return (
        a.get("gen_ai.operation.name") == "execute_tool"
        or a.get("openinference.span.kind") == "TOOL"
        or a.get("traceloop.span.kind") == "tool"
        or span.name.startswith("execute_tool")
    )
