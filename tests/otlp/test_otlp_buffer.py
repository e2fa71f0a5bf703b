"""The span buffer on its own: spans fed in, a fake clock advanced, no thread and no database."""

from __future__ import annotations

import pytest

from app.core.records import MAX_CALLS
from app.otlp.bounds import Refused
from app.otlp.buffer import SpanBuffer
from app.otlp.spans import SpanRef

T1, T2 = "a" * 32, "b" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def ref(trace: str, span: str, *, root: bool = False, tool: bool = False, index: int = 0) -> SpanRef:
    return SpanRef(trace_id=trace, span_id=span, is_root=root, index=index, tool=tool)


def buffer(clock: Clock, **bounds: int) -> SpanBuffer:
    return SpanBuffer(settle=1.0, idle=30.0, clock=clock, **bounds)


def feed(b: SpanBuffer, batch: int, *spans: SpanRef, run_id: int = 1) -> tuple[bool, int]:
    taken = b.reserve(run_id, list(spans), 10)
    return b.add(run_id, batch, "lines", b"x" * 10, list(spans), taken)


def ready(b: SpanBuffer) -> list[str]:
    taken, _ = b.take(False, False, set())
    return sorted(key[1] for key, _ in taken)


def test_a_trace_with_its_root_is_ready_once_it_settled() -> None:
    clock = Clock()
    b = buffer(clock)
    feed(b, 1, ref(T1, "02"), ref(T1, "01", root=True))
    clock.advance(0.9)
    assert ready(b) == []
    clock.advance(0.1)
    assert ready(b) == [T1] and b.pending == {}


def test_a_span_that_comes_before_it_settled_keeps_it_open() -> None:
    clock = Clock()
    b = buffer(clock)
    feed(b, 1, ref(T1, "01", root=True))
    clock.advance(0.8)
    feed(b, 2, ref(T1, "02"))
    clock.advance(0.8)
    assert ready(b) == []
    clock.advance(0.2)
    assert ready(b) == [T1]


def test_a_trace_without_its_root_is_ready_on_the_idle_timeout() -> None:
    clock = Clock()
    b = buffer(clock)
    feed(b, 1, ref(T1, "02"))
    clock.advance(29.9)
    assert ready(b) == []
    clock.advance(0.1)
    assert ready(b) == [T1]


def test_a_request_still_being_received_holds_back_the_traces_it_may_complete() -> None:
    clock = Clock()
    b = buffer(clock)
    slow = b.request_began()
    clock.advance(0.1)
    feed(b, 1, ref(T1, "01", root=True))
    clock.advance(5)
    assert ready(b) == []  # the slow request began before the trace's last span
    b.request_ended(slow)
    assert ready(b) == [T1]


def test_everything_takes_every_trace_and_early_scoring_takes_a_rooted_quiet_one() -> None:
    clock = Clock()
    b = buffer(clock)
    feed(b, 1, ref(T1, "01", root=True), ref(T2, "02"))
    clock.advance(0.2)  # a fifth of settle
    taken, early = b.take(False, True, set())
    assert taken == [] and [k[1] for k, _ in early] == [T1]
    taken, early = b.take(True, True, set())
    assert [k[1] for k, _ in taken] == [T2] and early == []


def test_repeats_are_left_out_and_a_request_of_repeats_holds_nothing() -> None:
    clock = Clock()
    b = buffer(clock)
    assert feed(b, 1, ref(T1, "01", root=True), ref(T1, "02")) == (True, 0)
    assert feed(b, 2, ref(T1, "02")) == (False, 1)
    assert b.buffered == 2 and list(b.batches) == [1]


def test_a_trace_given_back_after_a_failure_waits_settle_again() -> None:
    clock = Clock()
    b = buffer(clock)
    feed(b, 1, ref(T1, "01", root=True))
    clock.advance(1.0)
    taken, _ = b.take(False, False, set())
    b.give_back(taken)
    assert ready(b) == []
    clock.advance(1.0)
    assert ready(b) == [T1]


def test_a_trace_past_its_own_bound_is_refused_with_413_and_nothing_is_taken() -> None:
    b = buffer(Clock(), max_trace_spans=3)
    feed(b, 1, ref(T1, "01"), ref(T1, "02"))
    with pytest.raises(Refused) as refused:
        b.reserve(1, [ref(T1, "03"), ref(T1, "04")], 10)
    assert refused.value.status == 413 and "TOOLLENS_OTLP_MAX_TRACE_SPANS" in refused.value.error
    assert b.held.spans == 0 and b.reserved == {}
    b.reserve(1, [ref(T1, "03")], 10)  # up to the bound


def test_a_trace_past_the_calls_a_trajectory_holds_is_refused_with_413() -> None:
    b = buffer(Clock(), max_trace_spans=MAX_CALLS * 2)
    feed(b, 1, *[ref(T1, f"{i:04}", tool=True) for i in range(MAX_CALLS)])
    with pytest.raises(Refused) as refused:
        b.reserve(1, [ref(T1, "x", tool=True)], 10)
    assert refused.value.status == 413 and f"the {MAX_CALLS} one trajectory holds" in refused.value.error


@pytest.mark.parametrize(
    ("bounds", "setting"),
    [
        ({"max_spans": 3}, "TOOLLENS_OTLP_MAX_BUFFERED_SPANS"),
        ({"max_traces": 1}, "TOOLLENS_OTLP_MAX_TRACES"),
        ({"max_bytes": 15}, "TOOLLENS_OTLP_MAX_BUFFERED_BYTES"),
    ],
)
def test_a_full_buffer_refuses_with_503_and_takes_again_once_emptied(bounds: dict[str, int], setting: str) -> None:
    clock = Clock()
    b = buffer(clock, **bounds)
    feed(b, 1, ref(T1, "01", root=True), ref(T1, "02"))
    with pytest.raises(Refused) as refused:
        b.reserve(1, [ref(T2, "03"), ref(T2, "04")], 10)
    assert refused.value.status == 503 and setting in refused.value.error
    assert b.full(2, 10, 1) is not None
    taken, _ = b.take(True, False, set())
    b.buffered -= sum(len(p.spans) for _, p in taken)  # stored
    b.released({1: b.batches[1]}, {1: {T1}})
    assert b.full(2, 10, 1) is None
    b.reserve(1, [ref(T2, "03"), ref(T2, "04")], 10)


def test_an_empty_buffer_takes_a_request_larger_than_its_bounds() -> None:
    b = buffer(Clock(), max_spans=1, max_bytes=1)
    feed(b, 1, ref(T1, "01"), ref(T1, "02"))
    assert b.buffered == 2


def test_requests_being_staged_count_against_the_bounds() -> None:
    b = buffer(Clock(), max_spans=3)
    first = b.reserve(1, [ref(T1, "01"), ref(T1, "02")], 10)
    with pytest.raises(Refused):
        b.reserve(1, [ref(T2, "03"), ref(T2, "04")], 10)
    b.unreserve(first)  # not staged after all
    b.reserve(1, [ref(T2, "03"), ref(T2, "04")], 10)


def test_a_burst_has_ended_once_enough_traces_came_and_the_buffer_stayed_empty() -> None:
    clock = Clock()
    b = buffer(clock)
    for i in range(3):
        feed(b, i + 1, ref(f"{i:032x}", "01", root=True))
    clock.advance(2.0)
    assert not b.emptied_after(3, 1.0)  # three traces buffered: not empty
    feed(b, 4, ref(f"{0:032x}", "02"))  # one more span of the first trace, then all are stored
    b.take(True, False, set())
    b.buffered = 0  # what storing them does (``Lander.unbuffer``)
    clock.advance(0.5)
    assert not b.emptied_after(3, 1.0)  # empty for 0.5 s only: spans may still come
    assert not b.emptied_after(4, 0.5)  # three traces came, four asked for
    clock.advance(0.5)
    assert b.emptied_after(3, 1.0)  # 1 s after its last span
    assert not b.emptied_after(3, 1.0)  # said once: the count starts again
    feed(b, 9, ref("f" * 32, "01", root=True))
    b.take(True, False, set())
    b.buffered = 0
    clock.advance(5.0)
    assert not b.emptied_after(3, 1.0) and b.emptied_after(1, 1.0)
