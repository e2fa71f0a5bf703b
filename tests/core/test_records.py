"""SPEC §5 trajectory records: parsing, bounds, clear errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from app.core.errors import InvalidTrajectory
from app.core.records import iter_jsonl, parse_line, parse_record

SPEC_EXAMPLE = {
    "case_id": "saldo-001",
    "trial": 0,
    "question": "...",
    "calls": [
        {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}, "observation": '{"id": 8812}', "error": None}
    ],
    "answer": "Tu saldo es $142.900",
    "fault": {"step": 1, "kind": "http_503"},
}


def test_spec_example_round_trips() -> None:
    traj = parse_record(SPEC_EXAMPLE)
    assert traj.to_dict() == SPEC_EXAMPLE


def test_string_arguments_parse_or_stay_verbatim() -> None:
    rec = dict(SPEC_EXAMPLE, calls=[{"name": "a", "arguments": '{"x": 1}'}, {"name": "b", "arguments": '{"x": '}])
    traj = parse_record(rec)
    assert traj.calls[0].arguments == {"x": 1}
    assert traj.calls[1].arguments == '{"x": '


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({}, "case_id: required"),
        ({"case_id": "a", "trial": -1}, "trial: must be an integer from 0 to 2147483647"),
        ({"case_id": "a", "trial": 2**40}, "trial: must be an integer from 0 to 2147483647"),
        ({"case_id": "a", "reward": 10**400}, "reward: out of range"),
        ({"case_id": "a", "calls": {}}, "calls: must be a list"),
        ({"case_id": "a", "calls": [{"arguments": {}}]}, "calls[0].name: required"),
        ({"case_id": "a", "calls": [{"name": "x", "error": 5}]}, "calls[0].error: must be null or an object"),
        ({"case_id": "a", "fault": {"step": "uno"}}, "fault.step: must be an integer from 0"),
        ({"case_id": "a", "reward": "1"}, "reward: must be a number"),
    ],
)
def test_bad_records_name_the_line_and_field(record: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidTrajectory) as err:
        parse_line(json.dumps(record), index=7, source="t.jsonl")
    assert str(err.value).startswith("t.jsonl:7: ")
    assert message in str(err.value)


def test_invalid_json_line_names_its_number() -> None:
    stream = io.StringIO(json.dumps(SPEC_EXAMPLE) + "\n\n{not json\n")
    it = iter_jsonl(stream, source="t.jsonl")
    assert next(it).case_id == "saldo-001"
    with pytest.raises(InvalidTrajectory, match=r"^t\.jsonl:3: not valid JSON"):
        next(it)


def test_oversized_line_is_refused() -> None:
    from app.core import records

    line = json.dumps(dict(SPEC_EXAMPLE, answer="x" * (records.MAX_LINE_BYTES + 1)))
    with pytest.raises(InvalidTrajectory, match="longer than"):
        parse_line(line, index=1)


def test_untrusted_json_that_python_reads_differently() -> None:
    # integers past 64 bits stay integers; lone surrogates read as U+FFFD; deep nesting is refused by line
    line = json.dumps({"case_id": "a", "calls": [{"name": "x", "arguments": {"n": 2**64}}]})
    assert parse_line(line).calls[0].arguments == {"n": 2**64}
    assert parse_line('{"case_id": "a", "answer": "x\\ud800y"}', index=1).answer == "x\ufffdy"
    with pytest.raises(InvalidTrajectory, match="nested too deeply"):
        parse_line('{"case_id": "a", "calls": [{"name": "x", "arguments": ' + "[" * 5000 + "]" * 5000 + "}]}")
    # arguments that are not JSON (an empty string included) stay verbatim: a schema failure
    calls = [{"name": "x", "arguments": ""}, {"name": "y", "arguments": "[" * 5000}]
    traj = parse_record({"case_id": "a", "calls": calls})
    assert [c.arguments for c in traj.calls] == ["", "[" * 5000]


def test_one_rule_for_stored_strings_depth_and_numbers() -> None:
    """NUL and lone surrogates anywhere in a record read as U+FFFD; a JSON value nested
    deeper than MAX_DEPTH, or a number that is not finite, is refused naming the field."""
    from app.core.records import MAX_DEPTH

    def nested(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    text = '{"case_id": "c\\u0000", "question": "\\ud800?", "answer": "a\\u0000b", "stopped": "s\\udfff",'
    text += ' "calls": [{"name": "t\\u0000", "arguments": {"k\\u0000": ["v\\ud83d"]}, "observation": "o\\u0000",'
    text += ' "error": {"kind": "e\\u0000", "message": "m\\ud800"}}], "state": {"s": "\\u0000"}}'
    t = parse_line(text)
    assert (t.case_id, t.question, t.answer, t.stopped) == ("c\ufffd", "\ufffd?", "a\ufffdb", "s\ufffd")
    call = t.calls[0]
    assert (call.name, call.arguments, call.observation) == ("t\ufffd", {"k\ufffd": ["v\ufffd"]}, "o\ufffd")
    assert call.error is not None and (call.error.kind, call.error.message) == ("e\ufffd", "m\ufffd")
    assert t.state == {"s": "\ufffd"}
    assert parse_record({"case_id": "a", "calls": [{"name": "x", "arguments": nested(MAX_DEPTH)}]}).calls
    for where, record in [
        ("calls[0].arguments", {"case_id": "a", "calls": [{"name": "x", "arguments": nested(MAX_DEPTH + 1)}]}),
        ("calls[0].arguments", {"case_id": "a", "calls": [{"name": "x", "arguments": json.dumps(nested(300))}]}),
        ("state", {"case_id": "a", "state": {"s": nested(MAX_DEPTH)}}),
        ("calls[0].arguments", {"case_id": "a", "calls": [{"name": "x", "arguments": {"v": float("nan")}}]}),
        ("reward", {"case_id": "a", "reward": float("inf")}),
        ("reward", {"case_id": "a", "reward": float("nan")}),
    ]:
        with pytest.raises(InvalidTrajectory) as info:
            parse_record(record)
        assert info.value.field == where, (where, info.value)


def _read_both(lines: list[bytes], tmp_path: Path) -> list[tuple[object, object]]:
    """Each line read by read_jsonl (the cleaning skipped where the bytes allow it) and by
    parse_record with the cleaning always on: the trajectory, or the error's message and field."""
    from app.core.records import loads, read_jsonl

    path = tmp_path / "t.jsonl"
    out = []
    for line in lines:
        path.write_bytes(line + b"\n")
        got: list[object] = []
        for fast in (True, False):
            try:
                got.append(next(read_jsonl(path)) if fast else parse_record(loads(line), index=1, source=str(path)))
            except InvalidTrajectory as exc:
                got.append((str(exc), exc.field))
        out.append((got[0], got[1]))
    return out


def test_a_line_that_needs_no_cleaning_reads_the_same_without_it(tmp_path: Path) -> None:
    from app.core.records import MAX_DEPTH, needs_no_cleaning

    root = Path(__file__).resolve().parents[2] / "examples"
    real = [
        line
        for name in ("trajectories_v1.jsonl", "trajectories_v2.jsonl")
        for line in (root / name).read_bytes().splitlines()
        if line.strip()
    ]
    assert len(real) == 72 and all(needs_no_cleaning(line) for line in real)
    hostile = [
        b'{"case_id": "c\\u0000", "question": "\\ud800?", "calls": [{"name": "t", "arguments": {"k": "\\uDFFF"}}]}',
        b'{"case_id": "c", "question": "\xed\xa0\x80", "answer": "\xed\x95\x9c"}',  # a surrogate's bytes; Hangul
        b'{"case_id": "c", "calls": [{"name": "t", "arguments": "{\\"k\\": \\"\\\\u0000\\"}"}]}',  # in a string
        b'{"case_id": "c", "question": "\\ud83d\\ude00 \\u00e9", "answer": "\xc3\xa9"}',  # a pair, escaped or not
        b'{"case_id": "c", "calls": [{"name": "t", "arguments": {"v": NaN}}]}',  # json's fallback reads NaN
        b'{"case_id": "c", "calls": [{"name": "t", "arguments": {"v": [1.5, {"w": -Infinity}]}}]}',
        b'{"case_id": "c", "state": {"s": ' + b"[" * MAX_DEPTH + b"1" + b"]" * MAX_DEPTH + b"}}",
        b'{"case_id": "c", "messages": [{"role": "user", "content": "hola \\u0000"}], "calls": []}',
        b'{"case_id": "c", "messages": [{"role": "user", "content": "hola"}], "calls": [], "answer": 12345}',
    ]
    assert [needs_no_cleaning(line) for line in hostile] == [False, False, False, False, True, True, True, False, True]
    for fast, full in _read_both(real + hostile, tmp_path):
        assert fast == full
    got = dict(enumerate(_read_both(hostile, tmp_path)))
    assert got[0][0].question == "\ufffd?" and got[1][0].question == "\ufffd"  # type: ignore[attr-defined]
    assert [str(got[i][0]).split(": ", 1)[1] for i in (4, 5, 6)] == [
        "calls[0].arguments: holds a number that is not finite (NaN or an infinity)', 'calls[0].arguments')",
        "calls[0].arguments: holds a number that is not finite (NaN or an infinity)', 'calls[0].arguments')",
        f"state: nested deeper than {MAX_DEPTH} levels', 'state')",
    ]


def _deep(n: int) -> None:
    if n:
        _deep(n - 1)
    raise ValueError("x" * 5000)


def test_an_agent_error_is_kept_bounded_and_goes_back_out() -> None:
    """The last 8 of 21 frames, the message cut to 2,000 characters; the record reads back the same."""
    from app.core.records import MAX_ERROR_MESSAGE, MAX_FRAMES, AgentError

    try:
        _deep(20)
    except ValueError as exc:
        error = AgentError.from_exception(exc)
    assert error.type == "ValueError" and len(error.message) == MAX_ERROR_MESSAGE and error.message.endswith("…")
    assert len(error.traceback) == MAX_FRAMES == 8
    assert error.traceback[-1].endswith('in _deep: raise ValueError("x" * 5000)')
    assert error.traceback[0].endswith("in _deep: _deep(n - 1)")
    record = dict(SPEC_EXAMPLE, stopped="agent_error", agent_error=error.to_dict())
    assert parse_record(record).to_dict() == record


@pytest.mark.parametrize(
    ("error", "field"),
    [
        ("KeyError", "agent_error"),
        ({"message": "no type"}, "agent_error.type"),
        ({"type": "KeyError", "message": "m" * 2001}, "agent_error.message"),
        ({"type": "KeyError", "traceback": ["f"] * 9}, "agent_error.traceback"),
        ({"type": "KeyError", "traceback": [1]}, "agent_error.traceback[0]"),
    ],
)
def test_a_bad_agent_error_is_named(error: object, field: str) -> None:
    with pytest.raises(InvalidTrajectory) as info:
        parse_record(dict(SPEC_EXAMPLE, agent_error=error))
    assert field in str(info.value)
