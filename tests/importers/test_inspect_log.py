"""``--from inspect``: Inspect AI logs read without the ``inspect_ai``
package (the archive read directly). Small logs of our own: a new log
(span events, message ids, pooled model inputs, attachments) and an old one
(none of these), in .eval archives compressed each way (stored, deflate,
Zstandard) and as .json; archives that would blow memory; then the two real
logs of the shared data, their figures counted from the files themselves.
tests/importers/test_inspect_generated.py reads a log the real package wrote."""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.core.errors import InvalidTrajectory, SuiteError
from app.core.records import Trajectory
from app.importers import Options, evalzip
from app.importers.inspect_log import convert, inspect_ai_installed, read_log
from app.settings import Settings
from app.web.app import create_app
from tests.resources import DATA, shared_data

BROWSER = DATA / "inspect" / "inspect_ai_browser_gpt-4o-mini.json"
OXDNA = DATA / "inspect" / "inspect-action_oxdna_claude-opus-4-1.eval"
runner = CliRunner()
LONG = "total 12\n" + "drwxr-xr-x 2 agent agent 4096 notes\n" * 20  # long enough for Inspect to keep apart


def tool_info(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": "attachment://d1" if name == "bash" else "Submit an answer.",
        "parameters": {
            "type": "object",
            "properties": {"cmd" if name == "bash" else "answer": {"type": "string"}},
            "required": ["cmd" if name == "bash" else "answer"],
            "additionalProperties": False,
        },
    }


def usage(n_in: int, n_out: int, read: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": n_in,
        "output_tokens": n_out,
        "total_tokens": n_in + n_out + read,
        "input_tokens_cache_read": read,
    }


def new_sample(epoch: int, score: Any) -> dict[str, Any]:
    """A sample as Inspect >= 0.3.1xx writes it: ids, spans, pooled inputs, attachments."""
    messages = [
        {"id": "m1", "role": "system", "content": "You are an agent."},
        {"id": "m2", "role": "user", "content": "attachment://q1", "source": "input"},
        {
            "id": "m3",
            "role": "assistant",
            "content": [
                {"type": "reasoning", "reasoning": "let me look", "signature": "x"},
                {"type": "text", "text": "Listing the folder."},
            ],
            "tool_calls": [
                {"id": "t1", "function": "bash", "arguments": {"cmd": "ls"}, "type": "function"},
                {"id": "t2", "function": "bash", "arguments": {"cmd": "cat missing.txt"}},
            ],
        },
        {"id": "m4", "role": "tool", "tool_call_id": "t1", "function": "bash", "content": "attachment://r1"},
        # the command failed, and said so in its text: not a tool error (no `error`)
        {
            "id": "m5",
            "role": "tool",
            "tool_call_id": "t2",
            "function": "bash",
            "content": "cat: missing.txt: No such file or directory\n",
        },
        {"id": "m6", "role": "user", "content": "[usage] Tokens used so far: 1,200/100,000."},
        {
            "id": "m7",
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "t3", "function": "bash", "arguments": {"cmd": "attachment://a1"}}],
        },
        {
            "id": "m8",
            "role": "tool",
            "tool_call_id": "t3",
            "function": "bash",
            "content": "",
            "error": {"type": "timeout", "message": "Command timed out before completing."},
        },
        {
            "id": "m9",
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "t4", "function": "submit", "arguments": {"answer": "42"}}],
        },
        {"id": "m10", "role": "tool", "tool_call_id": "t4", "function": "submit", "content": "42"},
    ]
    span = "s-solver"
    events = [
        {"event": "span_begin", "id": "s-solvers", "type": "solvers", "name": "solvers"},
        {"event": "span_begin", "id": span, "parent_id": "s-solvers", "type": "solver", "name": "agent"},
        *[
            {
                "event": "model",
                "span_id": span,
                "model": "anthropic/claude-x",
                "input_refs": [[0, 2]],
                "tools": [tool_info("bash"), tool_info("submit")],
                "tool_choice": "auto",
                "config": {},
                "output": {
                    "model": "claude-x-2025",
                    "usage": usage(10 * k, 5, 100),
                    "time": 1.5,
                    "choices": [{"message": {"role": "assistant", "content": ""}, "stop_reason": "tool_calls"}],
                },
            }
            for k in (1, 2, 3)
        ],
        {"event": "span_end", "id": span},
        {"event": "span_end", "id": "s-solvers"},
        {"event": "span_begin", "id": "s-scorers", "type": "scorers", "name": "scorers"},
        {"event": "span_begin", "id": "s-judge", "parent_id": "s-scorers", "type": "scorer", "name": "judge"},
        {
            "event": "model",
            "span_id": "s-judge",
            "model": "openai/judge",
            "input_refs": [[0, 1]],
            "tools": [],
            "output": {"model": "judge", "usage": usage(999, 9)},
        },
        {"event": "span_end", "id": "s-judge"},
        {"event": "span_end", "id": "s-scorers"},
        {"event": "score", "score": {"value": score}},
    ]
    return {
        "id": "task-1",
        "epoch": epoch,
        "input": "attachment://q1",
        "target": "42",
        "messages": messages,
        "output": {
            "model": "claude-x-2025",
            "completion": "",
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": [
                            {"type": "reasoning", "reasoning": "done"},
                            {"type": "text", "text": "The answer is 42."},
                        ],
                    },
                    "stop_reason": "stop",
                }
            ],
        },
        "scores": {"judge": {"value": {"quality": 3}}, "match": {"value": score}},
        "events": events,
        "events_data": {"messages": [messages[0], messages[1]], "calls": []},
        "attachments": {
            "q1": "What is in the folder? Answer with a number.",
            "r1": LONG,
            "a1": "sleep 999",
            "d1": "Run a bash command.",
        },
        "model_usage": {},
        "uuid": f"u{epoch}",
    }


def old_sample(epoch: int) -> dict[str, Any]:
    """A sample as early logs write it: no ids, no spans, inputs inline, one ``score``."""
    messages = [
        {"role": "user", "content": "What is 6 x 7?", "source": "input"},
        {
            "role": "assistant",
            "content": "Let me compute.",
            "tool_calls": [{"id": "c1", "function": "python", "arguments": {"code": "print(6*7)"}, "type": "function"}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42\n"},
        {"role": "assistant", "content": "42"},
    ]
    return {
        "id": 7,
        "epoch": epoch,
        "input": "What is 6 x 7?",
        "target": ["42"],
        "messages": messages,
        "output": {"model": "gpt-4o-mini", "completion": "42", "choices": []},
        "score": {"value": "C" if epoch == 1 else "I"},
        "events": [
            {
                "event": "model",
                "model": "openai/gpt-4o-mini",
                "input": [{"role": "user", "content": "What is 6 x 7?"}],
                "tools": [
                    {
                        "name": "python",
                        "description": "Run Python.",
                        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
                    }
                ],
                "output": {
                    "model": "gpt-4o-mini",
                    "usage": {"input_tokens": 50, "output_tokens": 7, "total_tokens": 57},
                },
            }
        ],
    }


def header(version: int, ids: list[Any], epochs: int) -> dict[str, Any]:
    return {
        "version": version,
        "status": "success",
        "eval": {
            "task": "folder_task",
            "model": "anthropic/claude-x",
            "created": "2025-01-01T00:00:00",
            "dataset": {"samples": len(ids), "sample_ids": ids},
            "config": {"epochs": epochs},
        },
        "plan": {"steps": []},
        "results": {},
        "stats": {},
    }


def write_zip(path: Path, members: dict[str, bytes], method: int) -> Path:
    """A zip archive written byte by byte (the standard library writes no
    Zstandard before Python 3.14)."""
    local, central = bytearray(), bytearray()
    for name, data in members.items():
        packed = _pack(data, method)
        raw_name = name.encode()
        crc = zlib.crc32(data)
        offset = len(local)
        local += (
            struct.pack("<4s5H3L2H", b"PK\x03\x04", 63, 0, method, 0, 0, crc, len(packed), len(data), len(raw_name), 0)
            + raw_name
            + packed
        )
        central += (
            struct.pack(
                "<4s6H3L5H2L",
                b"PK\x01\x02",
                63,
                63,
                0,
                method,
                0,
                0,
                crc,
                len(packed),
                len(data),
                len(raw_name),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + raw_name
        )
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0)
    path.write_bytes(bytes(local + central + end))
    return path


def _pack(data: bytes, method: int) -> bytes:
    if method == evalzip.ZIP_ZSTANDARD:
        return zstandard.ZstdCompressor().compress(data)
    if method == zipfile.ZIP_DEFLATED:
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush()
    return data


def eval_log(path: Path, method: int, *, new: bool = True) -> Path:
    if new:
        samples = {f"samples/task-1_epoch_{e}.json": new_sample(e, score) for e, score in ((2, 0.5), (1, 1))}
        head = header(2, ["task-1"], 2)
    else:
        samples = {f"samples/7_epoch_{e}.json": old_sample(e) for e in (1, 2)}
        head = header(1, [7], 2)
    members = {
        "_journal/start.json": json.dumps({"version": head["version"], "eval": head["eval"]}).encode(),
        **{k: json.dumps(v).encode() for k, v in samples.items()},
        "header.json": json.dumps(head).encode(),
    }
    return write_zip(path, members, method)


def records(path: Path, options: Options | None = None) -> tuple[Any, list[Trajectory]]:
    conversion = convert(path, options or Options(), use_inspect_ai=False)
    out = []
    for _, item in conversion.records():
        assert not isinstance(item, InvalidTrajectory), str(item)
        out.append(item)
    return conversion, out


METHODS = [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, evalzip.ZIP_ZSTANDARD]


@pytest.mark.parametrize("method", METHODS, ids=["stored", "deflate", "zstd"])
def test_a_new_log_in_each_compression(method: int, tmp_path: Path) -> None:
    conversion, trajs = records(eval_log(tmp_path / "new.eval", method))
    assert [(t.case_id, t.trial, t.reward) for t in trajs] == [("task-1", 0, 1.0), ("task-1", 1, 0.5)]
    t = trajs[0]
    assert t.question == "What is in the folder? Answer with a number."  # an attachment, resolved
    assert [(c.name, c.arguments) for c in t.calls] == [
        ("bash", {"cmd": "ls"}),
        ("bash", {"cmd": "cat missing.txt"}),
        ("bash", {"cmd": "sleep 999"}),
        ("submit", {"answer": "42"}),
    ]
    assert t.calls[0].observation == LONG and t.calls[0].error is None
    assert t.calls[1].error is None  # a failed command's text, without `error`: an observation
    assert t.calls[2].error is not None and (t.calls[2].error.kind, t.calls[2].error.message) == (
        "timeout",
        "Command timed out before completing.",
    )
    assert t.answer == "The answer is 42."  # no completion: the first choice's text parts (reasoning left out)
    # the scaffold's later user message is no user turn; the reasoning part is not said
    assert [(m.role, m.calls_before, m.content) for m in t.messages or []] == [
        ("user", 0, "What is in the folder? Answer with a number."),
        ("assistant", 0, "Listing the folder."),
    ]
    # the agent's three requests; the scorer's model call is left out. Whole prompt = total - output
    assert [(m.model, m.input_tokens, m.output_tokens, m.cached_tokens, m.latency_ms) for m in t.model_calls or []] == [
        ("claude-x-2025", 10 * k + 100, 5, 100, 1500.0) for k in (1, 2, 3)
    ]
    tools = conversion.suite["toolset"]["tools"]
    assert [(x["name"], x["description"]) for x in tools] == [
        ("bash", "Run a bash command."),
        ("submit", "Submit an answer."),
    ]
    assert conversion.suite["name"] == "inspect folder_task"
    assert conversion.suite["cases"] == [
        {"id": "task-1", "question": t.question, "tags": ["inspect"], "notes": ["target: 42"]}
    ]


@pytest.mark.parametrize("method", METHODS, ids=["stored", "deflate", "zstd"])
def test_an_old_log_without_spans_ids_or_pools(method: int, tmp_path: Path) -> None:
    conversion, trajs = records(eval_log(tmp_path / "old.eval", method, new=False))
    assert [(t.case_id, t.trial, t.reward) for t in trajs] == [("7", 0, 1.0), ("7", 1, 0.0)]  # C, I
    assert [c.name for c in trajs[0].calls] == ["python"] and trajs[0].calls[0].observation == "42\n"
    assert trajs[0].answer == "42"
    assert [(m.model, m.input_tokens, m.output_tokens) for m in trajs[0].model_calls or []] == [("gpt-4o-mini", 50, 7)]
    assert conversion.suite["cases"][0]["notes"] == ["target: 42"]


def test_the_json_form_reads_as_the_archive(tmp_path: Path) -> None:
    doc = {**header(2, ["task-1"], 2), "samples": [new_sample(2, 0.5), new_sample(1, 1)]}
    (tmp_path / "log.json").write_text(json.dumps(doc))
    _, from_json = records(tmp_path / "log.json")
    _, from_eval = records(eval_log(tmp_path / "log.eval", zipfile.ZIP_DEFLATED))
    assert [t.to_dict() for t in from_json] == [t.to_dict() for t in from_eval]


def test_limits_errors_and_scores_without_a_number(tmp_path: Path) -> None:
    a = {**old_sample(1), "limit": {"type": "message", "limit": 10}, "score": {"value": "P"}}
    b = {**old_sample(2), "id": 8, "error": {"message": "boom", "traceback": ""}, "score": None}
    (tmp_path / "log.json").write_text(json.dumps({**header(2, [7, 8], 2), "samples": [a, b]}))
    _, (ta, tb) = records(tmp_path / "log.json")
    assert (ta.stopped, ta.reward) == ("message_limit", None)
    assert (tb.stopped, tb.reward) == ("agent_error", None)


def test_other_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps({"simulations": []}))
    with pytest.raises(SuiteError, match="not an Inspect log"):
        convert(tmp_path / "x.json", Options(), use_inspect_ai=False)
    write_zip(tmp_path / "y.eval", {"other.txt": b"hello"}, zipfile.ZIP_STORED)
    with pytest.raises(SuiteError, match=r"no header\.json"):
        convert(tmp_path / "y.eval", Options(), use_inspect_ai=False)
    (tmp_path / "z.eval").write_bytes(b"PK\x03\x04 broken")
    r = runner.invoke(cli, ["convert", "--from", "inspect", str(tmp_path / "z.eval"), "--out", str(tmp_path / "o")])
    assert r.exit_code != 0 and "not a readable zip archive" in r.output


def test_archives_that_would_blow_memory_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLLENS_IMPORT_MAX_MEMBER_BYTES", str(1 << 20))  # default 256 MiB: same rule, cheaper
    big = {
        "header.json": json.dumps(header(2, ["a"], 1)).encode(),
        "samples/a_epoch_1.json": b'{"id": "a", "pad": "' + b"0" * (2 << 20) + b'"}',
    }
    for method in METHODS:
        path = write_zip(tmp_path / f"bomb-{method}.eval", big, method)
        assert method == zipfile.ZIP_STORED or path.stat().st_size < 200_000  # 2 MiB inflate from a few KiB
        with pytest.raises(InvalidTrajectory, match="larger than 1048576 bytes"):
            convert(path, Options(), use_inspect_ai=False)
    # a member whose header lies about its size: read up to what it declares, then refused by its checksum
    for method in (zipfile.ZIP_DEFLATED, evalzip.ZIP_ZSTANDARD):
        path = write_zip(tmp_path / f"liar-{method}.eval", big, method)
        data = bytearray(path.read_bytes())
        at = data.rfind(b"PK\x01\x02")  # the sample's directory entry is the last one
        data[at + 24 : at + 28] = struct.pack("<L", 64)  # uncompressed size: 64 bytes
        path.write_bytes(bytes(data))
        (item,) = [x for _, x in read_log(path, use_inspect_ai=False)[1]]
        assert isinstance(item, InvalidTrajectory) and ("CRC" in str(item) or "checksum" in str(item))
    monkeypatch.setattr(evalzip, "MAX_MEMBERS", 10)
    many = {
        "header.json": json.dumps(header(2, [], 1)).encode(),
        **{f"samples/{i}_epoch_1.json": b"{}" for i in range(11)},
    }
    with pytest.raises(InvalidTrajectory, match="more than 10 members"):
        convert(write_zip(tmp_path / "many.eval", many, zipfile.ZIP_STORED), Options(), use_inspect_ai=False)


@shared_data(BROWSER)
def test_the_real_json_log() -> None:
    raw = json.loads(BROWSER.read_text())
    conversion, (t,) = records(BROWSER)
    assert [c.name for c in t.calls] == [
        "web_browser_go",
        "web_browser_click",
        "web_browser_click",
        "web_browser_click",
    ]
    assert all(c.error is None for c in t.calls) and t.reward == 1.0  # includes: "C"
    assert t.answer.startswith("The AI Security Institute (AISI) is the premier governmental organization")
    usage = raw["stats"]["model_usage"]["openai/gpt-4o-mini"]
    assert sum(m.input_tokens or 0 for m in t.model_calls or []) == usage["input_tokens"] == 15235
    assert sum(m.output_tokens or 0 for m in t.model_calls or []) == usage["output_tokens"] == 281
    assert len(conversion.suite["toolset"]["tools"]) == 8


@shared_data(OXDNA)
def test_the_real_eval_log() -> None:
    _, trajs = records(OXDNA)
    assert [(t.case_id, t.trial, t.reward) for t in trajs] == [("default", e, 1.0) for e in range(6)]
    assert sum(len(t.calls) for t in trajs) == 70
    assert {c.name for t in trajs for c in t.calls} == {"bash"}
    # failed commands (oxDNA's "ERROR: Invalid list 'cell'") sit in results without `error`: no tool error
    assert any("ERROR" in (c.observation or "") for t in trajs for c in t.calls)
    assert all(c.error is None for t in trajs for c in t.calls)
    with zipfile.ZipFile(OXDNA) as z:
        samples = [json.loads(z.read(n)) for n in z.namelist() if n.startswith("samples/")]
    prompt = sum(
        u["input_tokens"] + u["input_tokens_cache_read"] + u["input_tokens_cache_write"]
        for s in samples
        for u in s["model_usage"].values()
    )
    assert sum(m.input_tokens or 0 for t in trajs for m in t.model_calls or []) == prompt == 267_701
    assert {m.model for t in trajs for m in t.model_calls or []} == {"claude-opus-4-1-20250805"}


def test_a_newer_log_version_goes_to_inspect_ai_when_installed(tmp_path: Path) -> None:
    doc = {**header(3, ["task-1"], 1), "samples": [new_sample(1, 1)]}
    (tmp_path / "v3.json").write_text(json.dumps(doc))
    if inspect_ai_installed():  # its reader refuses our hand-made sample (fields it requires are missing)
        with pytest.raises(InvalidTrajectory, match="inspect_ai cannot read"):
            convert(tmp_path / "v3.json", Options())
    else:
        conversion = convert(tmp_path / "v3.json", Options())
        assert "log version 3 is newer than ToolLens reads itself" in conversion.notes[-1]
    _, (t,) = records(tmp_path / "v3.json")  # read as version 2 on request
    assert len(t.calls) == 4


def test_import_stores_the_samples(db_url: str, tmp_path: Path) -> None:
    path = eval_log(tmp_path / "new.eval", evalzip.ZIP_ZSTANDARD)
    r = runner.invoke(cli, ["import", str(path), "--format", "inspect", "--run", "insp", "--db", db_url])
    assert r.exit_code == 0, r.output
    assert "stored 2 trajectories, 8 calls" in r.stderr
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run = client.get("/api/runs").json()["data"][0]
        f = client.get(f"/api/runs/{run['id']}/figures").json()
    assert f["recovery"]["den"] == 2  # the timeout of each epoch
    assert f["usage"]["input_tokens"] == 2 * (110 + 120 + 130) and f["usage"]["model_calls"] == 6
