"""OTLP/protobuf export requests read straight from the wire into ``Span``s.

The protobuf runtime makes a Python object for every message and field read
(about 10 µs per GenAI span, most of the OTLP worker's decoding); this reader,
compiled, walks the bytes once and builds only the spans asked for. It reads what
``otel._span_from_pb`` reads, with the protobuf rules that can change it: the
last value of a scalar field wins, a message field given twice is merged, the
last member of a oneof given wins, a field with an unexpected wire type is an
unknown field, unknown fields (groups included) are skipped.

It reads bodies the protobuf runtime has accepted already (the receiver parses
every request before staging it), so it does not re-check parts it skips,
such as the UTF-8 of a resource's attributes; anything it cannot read raises
ValueError, and the caller then decodes with the runtime.
"""

from __future__ import annotations

import base64
import functools
import struct
from typing import Any, Final

from app.otlp.span import Span

# compiled (mypyc) it reads about twice as fast as the runtime; as Python source, half as fast
COMPILED: Final = not __file__.endswith(".py")
_VARINT: Final = 0
_I64: Final = 1
_LEN: Final = 2
_SGROUP: Final = 3
_EGROUP: Final = 4
_I32: Final = 5
_DOUBLE: Final = struct.Struct("<d")
_U64: Final = struct.Struct("<Q")
# an AnyValue read so far: nothing, a scalar (string, bool, int, double, bytes), an array, a kvlist
_NONE: Final = 0
_SCALAR: Final = 1  # (or string_value_strindex, read as None)
_ARRAY: Final = 2
_KVLIST: Final = 3
MAX_DEPTH: Final = 100  # nested values or groups; the runtime refuses far fewer (about 48 arrays)


# The OTLP messages this reader was written for, each with its fields (number, name), read or
# skipped on purpose. opentelemetry-proto releases add fields (AnyValue's oneof gained
# string_value_strindex): where the installed messages differ, the runtime reads.
SCHEMA: Final[dict[str, tuple[tuple[int, str], ...]]] = {
    "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest": ((1, "resource_spans"),),
    "opentelemetry.proto.trace.v1.ResourceSpans": ((1, "resource"), (2, "scope_spans"), (3, "schema_url")),
    "opentelemetry.proto.trace.v1.ScopeSpans": ((1, "scope"), (2, "spans"), (3, "schema_url")),
    "opentelemetry.proto.trace.v1.Span": (
        (1, "trace_id"),
        (2, "span_id"),
        (3, "trace_state"),
        (4, "parent_span_id"),
        (5, "name"),
        (6, "kind"),
        (7, "start_time_unix_nano"),
        (8, "end_time_unix_nano"),
        (9, "attributes"),
        (10, "dropped_attributes_count"),
        (11, "events"),
        (12, "dropped_events_count"),
        (13, "links"),
        (14, "dropped_links_count"),
        (15, "status"),
        (16, "flags"),
    ),
    "opentelemetry.proto.trace.v1.Span.Event": (
        (1, "time_unix_nano"),
        (2, "name"),
        (3, "attributes"),
        (4, "dropped_attributes_count"),
    ),
    "opentelemetry.proto.trace.v1.Status": ((2, "message"), (3, "code")),
    "opentelemetry.proto.common.v1.AnyValue": (
        (1, "string_value"),
        (2, "bool_value"),
        (3, "int_value"),
        (4, "double_value"),
        (5, "array_value"),
        (6, "kvlist_value"),
        (7, "bytes_value"),
        (8, "string_value_strindex"),
    ),
    "opentelemetry.proto.common.v1.ArrayValue": ((1, "values"),),
    "opentelemetry.proto.common.v1.KeyValueList": ((1, "values"),),
    "opentelemetry.proto.common.v1.KeyValue": ((1, "key"), (2, "value"), (3, "key_strindex")),
}


def runtime_schema() -> dict[str, tuple[tuple[int, str], ...]]:
    """The installed OTLP messages' fields, as ``SCHEMA`` lists them."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    messages: list[Any] = [
        trace_service_pb2.ExportTraceServiceRequest,
        trace_pb2.ResourceSpans,
        trace_pb2.ScopeSpans,
        trace_pb2.Span,
        trace_pb2.Span.Event,
        trace_pb2.Status,
        common_pb2.AnyValue,
        common_pb2.ArrayValue,
        common_pb2.KeyValueList,
        common_pb2.KeyValue,
    ]
    return {m.DESCRIPTOR.full_name: tuple(sorted((f.number, f.name) for f in m.DESCRIPTOR.fields)) for m in messages}


@functools.cache
def usable() -> bool:
    """Whether to read with this module: compiled, and written for the installed OTLP messages."""
    return COMPILED and runtime_schema() == SCHEMA


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``pos``; up to 10 bytes, the low 64 bits kept."""
    if pos >= len(buf):
        raise ValueError("truncated varint")
    b = buf[pos]
    if b < 0x80:  # most tags and lengths: one byte
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        if shift < 56:
            result |= (b & 0x7F) << shift
        else:  # beyond 63 bits: the protobuf runtime keeps the low 64
            result = (result | ((b & 0x7F) << shift)) & 0xFFFFFFFFFFFFFFFF
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def _tag(buf: bytes, pos: int) -> tuple[int, int]:
    """(tag, next position): a varint of at most 5 bytes, below 2**32, as the runtime allows."""
    tag, after = _varint(buf, pos)
    if tag > 0xFFFFFFFF or after - pos > 5:
        raise ValueError("a tag out of range")
    return tag, after


def _length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(start, stop) of the length-delimited field whose length is at ``pos``."""
    n, start = _varint(buf, pos)
    if start - pos > 5:
        raise ValueError("a length longer than 5 bytes")
    stop = start + n
    if stop > end:
        raise ValueError("field runs past its message")
    return start, stop


def _skip(buf: bytes, pos: int, wire: int, field: int, end: int, depth: int = 0) -> int:
    """The position after an unknown field's value."""
    if depth > MAX_DEPTH:
        raise ValueError("groups nested too deep")
    if field == 0:
        raise ValueError("field number 0")
    if wire == _VARINT:
        return _varint(buf, pos)[1]
    if wire == _I64:
        pos += 8
    elif wire == _I32:
        pos += 4
    elif wire == _LEN:
        pos = _length(buf, pos, end)[1]
    elif wire == _SGROUP:
        while True:
            tag, pos = _tag(buf, pos)
            if tag & 7 == _EGROUP:
                if tag >> 3 != field:
                    raise ValueError("mismatched end of group")
                break
            pos = _skip(buf, pos, tag & 7, tag >> 3, end, depth + 1)
    else:
        raise ValueError(f"wire type {wire} out of place")
    if pos > end:
        raise ValueError("field runs past its message")
    return pos


def _fixed64(buf: bytes, pos: int, end: int) -> int:
    if pos + 8 > end:
        raise ValueError("truncated fixed64")
    return int(_U64.unpack_from(buf, pos)[0])


def _text(buf: bytes, start: int, stop: int) -> str:
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"a string that is not UTF-8 ({exc})") from None


def _any(buf: bytes, pos: int, end: int, kind: int, value: Any, depth: int) -> tuple[int, Any]:
    """An ``AnyValue`` read on top of what an earlier occurrence of it gave (``kind``,
    ``value``): the last oneof member given wins, an array or kvlist given again
    extends the one before."""
    if depth > MAX_DEPTH:
        raise ValueError("values nested too deep")
    while pos < end:
        tag, pos = _tag(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == _LEN and (field == 1 or field == 5 or field == 6 or field == 7):
            start, stop = _length(buf, pos, end)
            if field == 1:
                kind, value = _SCALAR, _text(buf, start, stop)
            elif field == 7:
                kind, value = _SCALAR, base64.b64encode(buf[start:stop]).decode("ascii")
            elif field == 5:
                if kind != _ARRAY:
                    kind, value = _ARRAY, []
                _read_array(buf, start, stop, value, depth)
            else:
                if kind != _KVLIST:
                    kind, value = _KVLIST, {}
                _read_pairs(buf, start, stop, value, depth)
            pos = stop
        elif wire == _VARINT and (field == 2 or field == 3 or field == 8):
            raw, pos = _varint(buf, pos)
            if field == 2:
                kind, value = _SCALAR, raw != 0
            elif field == 8:  # string_value_strindex (a profiles dictionary index): no value here
                kind, value = _SCALAR, None
            else:
                kind, value = _SCALAR, raw - 0x10000000000000000 if raw > 0x7FFFFFFFFFFFFFFF else raw
        elif wire == _I64 and field == 4:
            if pos + 8 > end:
                raise ValueError("truncated double")
            kind, value = _SCALAR, float(_DOUBLE.unpack_from(buf, pos)[0])
            pos += 8
        else:
            pos = _skip(buf, pos, wire, field, end)
    return kind, value


def _read_array(buf: bytes, pos: int, end: int, into: list[Any], depth: int) -> None:
    """``ArrayValue``: its repeated ``values`` (field 1), appended."""
    while pos < end:
        tag, pos = _tag(buf, pos)
        if tag == (1 << 3 | _LEN):
            start, stop = _length(buf, pos, end)
            into.append(_any(buf, start, stop, _NONE, None, depth + 1)[1])
            pos = stop
        else:
            pos = _skip(buf, pos, tag & 7, tag >> 3, end)


def _read_pairs(buf: bytes, pos: int, end: int, into: dict[str, Any], depth: int) -> None:
    """``KeyValueList``: its ``KeyValue``s (field 1), into a dict in order (a later key
    replaces an earlier one, as the dict of the runtime's list does)."""
    while pos < end:
        tag, pos = _tag(buf, pos)
        if tag == (1 << 3 | _LEN):
            start, stop = _length(buf, pos, end)
            key, value = _key_value(buf, start, stop, depth + 1)
            into[key] = value
            pos = stop
        else:
            pos = _skip(buf, pos, tag & 7, tag >> 3, end)


def _key_value(buf: bytes, pos: int, end: int, depth: int = 0) -> tuple[str, Any]:
    key = ""
    kind = _NONE
    value: Any = None
    while pos < end:
        tag, pos = _tag(buf, pos)
        if tag == (1 << 3 | _LEN):
            start, stop = _length(buf, pos, end)
            key = _text(buf, start, stop)
            pos = stop
        elif tag == (2 << 3 | _LEN):
            start, stop = _length(buf, pos, end)
            kind, value = _any(buf, start, stop, kind, value, depth)  # a message given twice merges
            pos = stop
        else:
            pos = _skip(buf, pos, tag & 7, tag >> 3, end)
    return key, value


def _event(buf: bytes, pos: int, end: int) -> tuple[str, dict[str, Any]]:
    """``Event``: its name (2) and attributes (3)."""
    name = ""
    attributes: dict[str, Any] = {}
    while pos < end:
        tag, pos = _tag(buf, pos)
        if tag == (2 << 3 | _LEN):
            start, stop = _length(buf, pos, end)
            name = _text(buf, start, stop)
            pos = stop
        elif tag == (3 << 3 | _LEN):
            start, stop = _length(buf, pos, end)
            key, value = _key_value(buf, start, stop)
            attributes[key] = value
            pos = stop
        else:
            pos = _skip(buf, pos, tag & 7, tag >> 3, end)
    return name, attributes


def _span(buf: bytes, pos: int, end: int) -> Span:
    """``Span``: the fields ``otel._span_from_pb`` reads."""
    trace_id = span_id = parent_id = b""
    name = message = ""
    start_time = end_time = code = 0
    attributes: dict[str, Any] = {}
    events: list[tuple[str, dict[str, Any]]] = []
    while pos < end:
        tag, pos = _tag(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == _LEN and (
            field == 9 or field == 1 or field == 2 or field == 4 or field == 5 or field == 11 or field == 15
        ):
            start, stop = _length(buf, pos, end)
            if field == 9:
                key, value = _key_value(buf, start, stop)
                attributes[key] = value
            elif field == 1:
                trace_id = buf[start:stop]
            elif field == 2:
                span_id = buf[start:stop]
            elif field == 4:
                parent_id = buf[start:stop]
            elif field == 5:
                name = _text(buf, start, stop)
            elif field == 11:
                events.append(_event(buf, start, stop))
            else:
                code, message = _status(buf, start, stop, code, message)
            pos = stop
        elif wire == _I64 and (field == 7 or field == 8):
            if field == 7:
                start_time = _fixed64(buf, pos, end)
            else:
                end_time = _fixed64(buf, pos, end)
            pos += 8
        else:
            pos = _skip(buf, pos, wire, field, end)
    return Span(
        trace_id.hex(), span_id.hex(), parent_id.hex(), name, start_time, end_time, attributes, code, message, events
    )


def _status(buf: bytes, pos: int, end: int, code: int, message: str) -> tuple[int, str]:
    """``Status`` merged into what an earlier occurrence set: message (2), code (3, an int32 enum)."""
    while pos < end:
        tag, pos = _tag(buf, pos)
        if tag == (2 << 3 | _LEN):
            start, stop = _length(buf, pos, end)
            message = _text(buf, start, stop)
            pos = stop
        elif tag == (3 << 3 | _VARINT):
            raw, pos = _varint(buf, pos)
            raw &= 0xFFFFFFFF
            code = raw - 0x100000000 if raw > 0x7FFFFFFF else raw
        else:
            pos = _skip(buf, pos, tag & 7, tag >> 3, end)
    return code, message


def _messages(buf: bytes, pos: int, end: int, field: int) -> list[tuple[int, int]]:
    """(start, stop) of each occurrence of the repeated message ``field`` between ``pos`` and ``end``."""
    out: list[tuple[int, int]] = []
    want = field << 3 | _LEN
    while pos < end:
        tag, pos = _tag(buf, pos)
        if tag == want:
            start, stop = _length(buf, pos, end)
            out.append((start, stop))
            pos = stop
        else:
            pos = _skip(buf, pos, tag & 7, tag >> 3, end)
    return out


def _count(buf: bytes, pos: int, end: int, field: int, limit: int) -> int:
    """How many times the message ``field`` occurs between ``pos`` and ``end``, counted to ``limit`` + 1 at most."""
    n = 0
    want = field << 3 | _LEN
    while pos < end and n <= limit:
        tag, pos = _tag(buf, pos)
        if tag == want:
            pos = _length(buf, pos, end)[1]
            n += 1
        else:
            pos = _skip(buf, pos, tag & 7, tag >> 3, end)
    return n


def span_count(body: bytes, limit: int) -> int:
    """The spans of an ``ExportTraceServiceRequest``, counted without reading them and
    only up to ``limit`` + 1 (a bound checked before any is built); ValueError if unreadable."""
    n = 0
    for rs_start, rs_stop in _messages(body, 0, len(body), 1):
        for ss_start, ss_stop in _messages(body, rs_start, rs_stop, 2):
            n += _count(body, ss_start, ss_stop, 2, limit - n)
            if n > limit:
                return n
    return n


def wire_spans(body: bytes, wanted: set[int] | None) -> dict[int, Span]:
    """The spans of an ``ExportTraceServiceRequest`` at the ``wanted`` positions (all
    with None), numbered as ``resource_spans[*].scope_spans[*].spans[*]`` in order;
    ValueError if the body cannot be read."""
    out: dict[int, Span] = {}
    index = 0
    for rs_start, rs_stop in _messages(body, 0, len(body), 1):  # resource_spans
        for ss_start, ss_stop in _messages(body, rs_start, rs_stop, 2):  # scope_spans
            for start, stop in _messages(body, ss_start, ss_stop, 2):  # spans
                if wanted is None or index in wanted:
                    out[index] = _span(body, start, stop)
                index += 1
    return out


_TOOL_PAIRS: Final = (  # a KeyValue of ``spans.is_tool_span``'s marks, as encoders write it
    b"\x0a\x15gen_ai.operation.name\x12\x0e\x0a\x0cexecute_tool",
    b"\x0a\x17openinference.span.kind\x12\x06\x0a\x04TOOL",
    b"\x0a\x13traceloop.span.kind\x12\x06\x0a\x04tool",
)


def tool_spans(body: bytes) -> list[bool]:
    """Per span of an ``ExportTraceServiceRequest`` (in ``wire_spans`` order), whether it is a
    tool span (``spans.is_tool_span``), found in its bytes without reading its attributes:
    one of the marks as a key and value, or a name that starts with ``execute_tool``;
    ValueError if the body cannot be read."""
    marks = [mark for mark in _TOOL_PAIRS if mark in body]  # searched in each span only if in the body
    named = b"execute_tool" in body
    if not marks and not named:
        return [False] * span_count(body, len(body))  # no tool span at all: found at C speed
    out: list[bool] = []
    for rs_start, rs_stop in _messages(body, 0, len(body), 1):
        for ss_start, ss_stop in _messages(body, rs_start, rs_stop, 2):
            for start, stop in _messages(body, ss_start, ss_stop, 2):
                out.append(_is_tool(body, start, stop, marks, named))
    return out


def _is_tool(body: bytes, start: int, stop: int, marks: list[bytes], named: bool) -> bool:
    for mark in marks:
        if body.find(mark, start, stop) >= 0:
            return True
    at = body.find(b"execute_tool", start, stop) if named else -1
    while at >= 0:  # the name field (5): its tag, then a length of one byte or two
        if at - 2 >= start and body[at - 2] == 0x2A and body[at - 1] < 0x80:
            return True
        if at - 3 >= start and body[at - 3] == 0x2A and body[at - 2] >= 0x80 and body[at - 1] < 0x80:
            return True
        at = body.find(b"execute_tool", at + 1, stop)
    return False
