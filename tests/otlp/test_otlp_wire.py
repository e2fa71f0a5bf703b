"""The direct wire reader of OTLP/protobuf requests gives exactly the spans the
protobuf runtime gives: on spans the real SDK encoded, on random requests with
every kind of value, and on hand-written bytes that exercise the protobuf
rules (last value wins, messages merge, oneof switches, unknown fields)."""

from __future__ import annotations

import random
import struct

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from app.otlp import spans
from app.otlp import wire as otlp_wire
from app.otlp.spans import BATCH_PROTOBUF, _batch_spans, _pb_spans, _span_from_pb, spans_of
from app.otlp.wire import wire_spans


def runtime_spans(body: bytes) -> dict[int, spans.Span]:
    return {i: _span_from_pb(s) for i, s in enumerate(_pb_spans(body))}


# -- random requests built with the protobuf classes ------------------------------------------


def _text(rng: random.Random) -> str:
    pool = ["", "a", "gen_ai.tool.name", "ñandú", "日本", "😀", "\x00", "x" * 300, "Error: boom"]
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, 3)))


def _fill_value(v: AnyValue, rng: random.Random, depth: int) -> None:
    kind = rng.choice(["none", "s", "b", "i", "d", "bytes"] + (["a", "k"] if depth < 3 else []))
    if kind == "s":
        v.string_value = _text(rng)
    elif kind == "b":
        v.bool_value = rng.random() < 0.5
    elif kind == "i":
        v.int_value = rng.choice(
            [0, 1, -1, 127, 128, 2**31, -(2**31), 2**63 - 1, -(2**63), rng.randint(-(9**18), 9**18)]
        )
    elif kind == "d":
        v.double_value = rng.choice([0.0, -0.0, 1.5, -2.25e300, float("inf"), rng.uniform(-1e6, 1e6)])
    elif kind == "bytes":
        v.bytes_value = rng.randbytes(rng.randint(0, 12))
    elif kind == "a":
        v.array_value.SetInParent()
        for _ in range(rng.randint(0, 3)):
            _fill_value(v.array_value.values.add(), rng, depth + 1)
    elif kind == "k":
        v.kvlist_value.SetInParent()
        _fill_pairs(v.kvlist_value.values, rng, depth + 1)


def _fill_pairs(pairs: object, rng: random.Random, depth: int) -> None:
    for _ in range(rng.randint(0, 4)):
        kv = pairs.add()  # type: ignore[attr-defined]
        kv.key = rng.choice(["k", "gen_ai.input.messages", "toollens.trial", "", "ключ"])  # repeats on purpose
        if rng.random() < 0.9:
            _fill_value(kv.value, rng, depth)


def _fill_span(s: PbSpan, rng: random.Random) -> None:
    s.trace_id = rng.randbytes(16)
    s.span_id = rng.randbytes(rng.choice([0, 8]))
    if rng.random() < 0.6:
        s.parent_span_id = rng.randbytes(8)
    s.name = _text(rng)
    s.trace_state = "k=v"  # fields the reader skips
    s.kind = rng.randint(0, 5)
    s.flags = rng.randint(0, 2**32 - 1)
    s.dropped_attributes_count = rng.randint(0, 3)
    s.start_time_unix_nano = rng.choice([0, 1, 2**64 - 1, rng.randint(0, 2**63)])
    s.end_time_unix_nano = rng.randint(0, 2**64 - 1)
    _fill_pairs(s.attributes, rng, 0)
    for _ in range(rng.choice([0, 0, 1, 2])):
        e = s.events.add()
        e.time_unix_nano = rng.randint(0, 2**64 - 1)
        e.name = rng.choice(["exception", "", "gen_ai.choice"])
        _fill_pairs(e.attributes, rng, 0)
    if rng.random() < 0.3:
        link = s.links.add()
        link.trace_id, link.span_id = rng.randbytes(16), rng.randbytes(8)
    if rng.random() < 0.7:
        s.status.code = rng.choice([0, 1, 2, 7, -1])  # an open enum: values beyond the three names too
        s.status.message = _text(rng)


def random_request(rng: random.Random) -> bytes:
    request = ExportTraceServiceRequest()
    for _ in range(rng.randint(0, 3)):
        rs = request.resource_spans.add()
        _fill_pairs(rs.resource.attributes, rng, 0)
        rs.schema_url = "https://opentelemetry.io/schemas/1.26.0"
        for _ in range(rng.randint(0, 3)):
            ss = rs.scope_spans.add()
            ss.scope.name = "bench"
            for _ in range(rng.randint(0, 4)):
                _fill_span(ss.spans.add(), rng)
    return request.SerializeToString()


def test_random_requests_read_as_the_runtime_reads_them() -> None:
    rng = random.Random(11)
    spans = 0
    for _ in range(400):
        body = random_request(rng)
        expected = runtime_spans(body)
        assert wire_spans(body, None) == expected
        wanted = {i for i in expected if rng.random() < 0.5} | {len(expected) + 3}  # one past the end
        assert wire_spans(body, wanted) == {i: expected[i] for i in wanted if i in expected}
        spans += len(expected)
    assert spans > 1000


def test_tool_spans_are_found_in_the_bytes_as_is_tool_span_finds_them() -> None:
    """The receiver counts a trace's tool spans (at most 5,000 buffered) from the bytes: the same
    spans ``is_tool_span`` calls tools, the marks given or not, among random other attributes
    (a chat span's ``role: tool`` is no tool span)."""
    from app.otlp.spans import is_tool_span

    rng = random.Random(5)
    marks = [
        ("gen_ai.operation.name", "execute_tool"),
        ("openinference.span.kind", "TOOL"),
        ("traceloop.span.kind", "tool"),
        ("role", "tool"),
        ("gen_ai.operation.name", "chat"),
    ]
    tools = seen = 0
    for _ in range(300):
        request = ExportTraceServiceRequest()
        for _ in range(rng.randint(1, 2)):
            ss = request.resource_spans.add().scope_spans.add()
            for _ in range(rng.randint(1, 6)):
                span = ss.spans.add()
                _fill_span(span, rng)
                if rng.random() < 0.2:
                    span.name = rng.choice(["execute_tool ver_saldo", "x" * 200 + " execute_tool", "execute_tool"])
                if rng.random() < 0.5:
                    key, value = rng.choice(marks)
                    pair = span.attributes.add()
                    pair.key, pair.value.string_value = key, value
        body = request.SerializeToString()
        expected = [is_tool_span(x) for x in runtime_spans(body).values()]
        assert otlp_wire.tool_spans(body) == expected
        assert [r.tool for r in spans.span_refs_from_protobuf(body)] == expected
        tools, seen = tools + sum(expected), seen + len(expected)
    assert 0.2 * seen < tools < 0.6 * seen


def test_spans_the_sdk_encoded_read_as_the_runtime_reads_them() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    tool_attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.call.arguments": '{"id": "u1"}',
        "flags": [True, False],
        "sizes": [1, 2, 3],
        "ratios": [0.5],
    }
    with (
        tracer.start_as_current_span("invoke_agent", attributes={"toollens.trial": 2, "toollens.reward": 0.5}),
        tracer.start_as_current_span("execute_tool get_user", attributes=tool_attributes) as span,
    ):
        span.add_event("exception", {"exception.message": "boom"})
        span.set_status(Status(StatusCode.ERROR, "boom"))
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    read = wire_spans(body, None)
    assert read == runtime_spans(body)
    tool = next(s for s in read.values() if s.name.startswith("execute_tool"))
    assert (tool.status_code, tool.status_message) == (2, "boom")
    assert tool.events == [("exception", {"exception.message": "boom"})]
    assert tool.attributes["sizes"] == [1, 2, 3] and tool.attributes["flags"] == [True, False]


# -- hand-written bytes: the protobuf rules ---------------------------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


def s(text: str) -> bytes:
    return text.encode()


def kv(key: str, *values: bytes) -> bytes:
    return ld(1, s(key)) + b"".join(ld(2, v) for v in values)


def array(*items: bytes) -> bytes:
    return b"".join(ld(1, v) for v in items)


def request_of(*spans: bytes) -> bytes:
    return ld(1, ld(2, b"".join(ld(2, sp) for sp in spans)))


RULES_SPAN = b"".join(
    [
        ld(1, bytes(range(16))),
        ld(2, b"\x01" * 8),
        ld(5, s("first")),
        ld(5, s("second")),  # the last value of a field wins
        ld(15, tag(3, 0) + varint(2)),
        ld(15, ld(2, s("boom"))),  # a message given twice merges
        ld(15, tag(3, 0) + varint(-1)),  # an enum as a negative int32: ten bytes on the wire
        tag(7, 1) + struct.pack("<Q", 2**64 - 1),
        tag(8, 0) + varint(5),  # end time as a varint: an unknown field
        ld(9, kv("dup", ld(1, s("one")))),
        ld(9, kv("dup", tag(3, 0) + varint(-5))),  # a later key replaces
        ld(9, kv("merged", ld(5, array(ld(1, s("a")))) + ld(5, array(tag(2, 0) + varint(1))))),  # arrays merge
        ld(9, kv("switched", ld(5, array(ld(1, s("a")))) + ld(1, s("now a string")))),  # the last oneof member wins
        ld(9, kv("fresh", ld(5, array(ld(1, s("a")))) + ld(1, s("x")) + ld(5, array(ld(1, s("b")))))),
        ld(9, kv("twice", ld(6, ld(1, kv("a", ld(1, s("1"))))), ld(6, ld(1, kv("b", ld(1, s("2"))))))),  # merged
        ld(9, kv("big", tag(3, 0) + b"\xff" * 9 + b"\x7f")),  # beyond 64 bits: the low 64 kept
        ld(9, kv("double", tag(4, 1) + struct.pack("<d", -2.5))),
        ld(9, kv("bytes", ld(7, b"\x00\xff"))),
        ld(9, kv("empty")),
        ld(9, ld(2, ld(1, s("no key")))),
        ld(9, tag(1, 0) + varint(3) + ld(2, ld(1, s("keyless")))),  # a key with the wrong wire type: unknown
        tag(9, 0) + varint(1),  # attributes with the wrong wire type: unknown
        tag(99, 0) + varint(300),
        tag(98, 5) + b"\0\0\0\0",
        tag(97, 1) + b"\0" * 8,
        ld(96, b"xyz"),
        tag(95, 3) + tag(1, 0) + varint(1) + ld(2, b"in a group") + tag(95, 4),  # an unknown group
        ld(11, ld(2, s("exception")) + ld(3, kv("exception.message", ld(1, s("m")))) + tag(1, 1) + b"\0" * 8),
    ]
)


def test_the_protobuf_rules_are_the_runtimes() -> None:
    body = request_of(RULES_SPAN, ld(5, s("second span")))
    read = wire_spans(body, None)
    assert read == runtime_spans(body)
    span = read[0]
    a = span.attributes
    assert (span.name, span.status_code, span.status_message) == ("second", -1, "boom")
    assert (span.start, span.end) == (2**64 - 1, 0)
    assert a["dup"] == -5 and a["merged"] == ["a", True] and a["switched"] == "now a string"
    assert a["fresh"] == ["b"] and a["twice"] == {"a": "1", "b": "2"} and a["big"] == -1
    assert a["double"] == -2.5 and a["bytes"] == "AP8=" and a["empty"] is None and a[""] == "keyless"
    assert span.events == [("exception", {"exception.message": "m"})]
    assert read[1].name == "second span" and read[1].trace_id == ""


@pytest.mark.parametrize("cut", [1, 2, 5, 40, 200])
def test_a_truncated_body_is_refused_and_the_runtime_says_why(cut: int) -> None:
    body = request_of(RULES_SPAN)[:-cut]
    with pytest.raises(ValueError):
        wire_spans(body, None)
    with pytest.raises(ValueError, match="not an OTLP protobuf export request"):
        _batch_spans(BATCH_PROTOBUF, body, None)
    (error,) = spans_of({7: (BATCH_PROTOBUF, body)}, [[(7, 0)]])
    assert isinstance(error, str) and error.startswith("staged batch 7 cannot be read (not an OTLP protobuf")


def test_what_the_wire_reader_refuses_the_runtime_reads() -> None:
    """Field number 0 inside an unknown group: the runtime reads past it, the reader refuses."""
    body = request_of(ld(5, s("span")) + tag(50, 3) + tag(0, 0) + varint(1) + tag(50, 4))
    with pytest.raises(ValueError):
        wire_spans(body, None)
    assert _batch_spans(BATCH_PROTOBUF, body, None) == runtime_spans(body)
    assert runtime_spans(body)[0].name == "span"


@pytest.mark.parametrize(
    ("extra", "readable"),
    [
        (tag(0, 0) + varint(1), False),  # field number 0
        (tag(50, 4), False),  # the end of a group that never began
        (tag(50, 3) + tag(51, 4), False),  # a group ended by another field's end
        (tag(50, 3) + tag(1, 0) + varint(1), False),  # a group never ended
        (tag(50, 6), False),
        (tag(50, 7), False),  # wire types that do not exist
        (tag(50, 3) * 3 + tag(50, 4) * 3, True),  # groups in groups
    ],
)
def test_what_the_runtime_refuses_the_wire_reader_refuses(extra: bytes, readable: bool) -> None:
    body = request_of(ld(5, s("span")) + extra)
    if readable:
        assert wire_spans(body, None) == runtime_spans(body) and len(runtime_spans(body)) == 1
        return
    with pytest.raises(ValueError):
        runtime_spans(body)
    with pytest.raises(ValueError):
        wire_spans(body, None)


@pytest.mark.parametrize(
    "hex_body",
    [
        "0a10120e120c4a0a0a016b12050a01734001",  # a string, then string_value_strindex: no value
        "0a121210120e4a0c0a016b12030a017312024001",  # the same in two occurrences of KeyValue.value
        "0a1b121912174a150a016b12102a050a030a016140012a050a030a0162",  # an array, strindex, an array: a new array
    ],
)
def test_string_value_strindex_is_a_oneof_member(hex_body: str) -> None:
    body = bytes.fromhex(hex_body)
    assert wire_spans(body, None) == runtime_spans(body)


@pytest.mark.parametrize(
    "hex_body",
    [
        "0a0c120a1208aa80808080000178",  # a tag written in 6 bytes
        "0a10120e120c2a8180808080808080800078",  # a length written in 10 bytes
    ],
)
def test_tags_and_lengths_beyond_the_runtimes_limits_are_refused(hex_body: str) -> None:
    body = bytes.fromhex(hex_body)
    with pytest.raises(ValueError):
        runtime_spans(body)
    with pytest.raises(ValueError):
        wire_spans(body, None)


def test_nesting_too_deep_is_refused_not_a_crash() -> None:
    value = ld(1, s("leaf"))
    for _ in range(1000):  # arrays in arrays, far beyond the runtime's limit (about 48)
        value = ld(5, ld(1, value))
    deep_values = request_of(ld(9, kv("deep", value)))
    deep_groups = request_of(ld(5, s("x")) + tag(95, 3) * 100_000 + tag(95, 4) * 100_000)
    for body in (deep_values, deep_groups):
        with pytest.raises(ValueError):
            runtime_spans(body)
        with pytest.raises(ValueError, match="nested too deep"):
            wire_spans(body, None)


def test_the_reader_knows_the_installed_otlp_messages() -> None:
    """A release of opentelemetry-proto that changes these messages turns the reader off (the
    protobuf runtime then reads every request, correct but slower): review otlp_wire for it."""
    assert otlp_wire.runtime_schema() == otlp_wire.SCHEMA
    assert otlp_wire.usable() == otlp_wire.COMPILED
