"""``--from inspect`` on logs the real ``inspect_ai`` package writes (its
mock model plays a scripted agent: tests/inspect_mock.py), in both of its
log forms, read by its own reader and by ours; the figures counted by hand."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from app.core.errors import InvalidTrajectory
from app.core.reports.evaluate import score_trajectories
from app.core.suites.suite import parse_suite
from app.importers import Options
from app.importers.evalzip import ZIP_ZSTANDARD
from app.importers.inspect_log import convert
from tests.resources import require_module

require_module("inspect_ai")
from tests.inspect_mock import make_log  # noqa: E402  (needs inspect_ai)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("inspect-logs")
    return {fmt: make_log(folder, fmt) for fmt in ("eval", "json")}


def test_the_archive_is_zstandard_compressed(logs: dict[str, Path]) -> None:
    with zipfile.ZipFile(logs["eval"]) as z:
        assert {i.compress_type for i in z.infolist()} == {ZIP_ZSTANDARD}


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_both_readers_give_the_same_records(fmt: str, logs: dict[str, Path]) -> None:
    ours, theirs = (convert(logs[fmt], Options(), use_inspect_ai=use) for use in (False, True))
    assert ours.suite == theirs.suite and ours.notes == theirs.notes
    assert [t.to_dict() for _, t in ours.records()] == [t.to_dict() for _, t in theirs.records()]


@pytest.mark.parametrize("fmt", ["eval", "json"])
@pytest.mark.parametrize("use_inspect_ai", [False, True])
def test_hand_counted_figures(fmt: str, use_inspect_ai: bool, logs: dict[str, Path]) -> None:
    conversion = convert(logs[fmt], Options(), use_inspect_ai=use_inspect_ai)
    trajs = [t for _, t in conversion.records()]
    assert not any(isinstance(t, InvalidTrajectory) for t in trajs)
    retry, give_up = trajs  # the dataset's order
    assert (retry.case_id, retry.reward, give_up.case_id, give_up.reward) == ("retry", 1.0, "give-up", 0.0)
    assert [c.arguments for c in retry.calls] == [{"city": "Atlantis"}, {"city": "Paris"}]
    errors = [(c.error.kind, c.error.message) if c.error else None for c in retry.calls + give_up.calls]
    assert errors == [("unknown", "unknown city Atlantis"), None, ("unknown", "unknown city Atlantis"), None]
    assert give_up.calls[1].observation == "Error: no station"  # a text without Inspect's error: no tool error
    assert retry.answer == "It is 18C in Paris."
    assert give_up.answer == "I cannot find the weather for Atlantis, I give up."
    assert [t["name"] for t in conversion.suite["toolset"]["tools"]] == ["weather"]
    report = score_trajectories(parse_suite(conversion.suite), trajs).to_json()  # type: ignore[arg-type]
    # 4 calls, all schema-valid; 2 tool errors: one corrected by a retry, one followed by a give-up
    assert report["schema_validity"] == {"num": 4, "den": 4}
    assert report["recovery"] == {"num": 1, "den": 2}
    assert report["outcomes"] == {"recovered": 1, "gave_up": 1, "hallucinated": 0, "confused": 0}
    assert report["pass_hat_k"] == {"1": 0.5}
    # 3 requests a sample; input 100, 200, 300 (+ 5 cached, which Inspect counts beside the input), output 10
    usage = [(m.model, m.input_tokens, m.output_tokens, m.cached_tokens) for t in trajs for m in t.model_calls or []]
    assert usage == [("mockllm/model", 100 * k + 5, 10, 5) for k in (1, 2, 3)] * 2


def test_the_default_reader_is_toollens_own_for_a_known_version(logs: dict[str, Path]) -> None:
    default, ours = (convert(logs["eval"], Options(), use_inspect_ai=use) for use in (None, False))
    assert [t.to_dict() for _, t in default.records()] == [t.to_dict() for _, t in ours.records()]


def test_inspect_ais_reader_resolves_references_within_the_same_budgets(
    logs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package's reader leaves ``attachment://`` references to ToolLens,
    which counts them against the attachment budgets (issue 46)."""
    from app.importers.evalzip import read_member

    text = "the station says: 18C and sunny. " * 20  # 660 characters, each tool result a reference to it
    out = tmp_path / "refs.eval"
    with zipfile.ZipFile(logs["eval"]) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as w:
        for info in z.infolist():
            data = read_member(z, info, str(logs["eval"]))
            if info.filename.startswith("samples/"):
                sample = json.loads(data)
                sample.setdefault("attachments", {})["abc123"] = text
                for m in sample["messages"]:
                    if m["role"] == "tool":
                        m["content"] = "attachment://abc123"
                data = json.dumps(sample).encode()
            w.writestr(info.filename, data)
    trajs = [t for _, t in convert(out, Options(), use_inspect_ai=True).records()]
    assert [c.observation for t in trajs for c in t.calls] == [text] * 4  # type: ignore[union-attr]
    monkeypatch.setenv("TOOLLENS_IMPORT_MAX_ATTACHMENT_CHARS", "1000")  # two references: 1,320 characters
    with pytest.raises(
        InvalidTrajectory,
        match="sample 'retry' epoch 1: attachment 'abc123': the sample's "
        "attachment references expand to more than 1000 characters",
    ):
        convert(out, Options(), use_inspect_ai=True)
