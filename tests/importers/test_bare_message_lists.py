"""Importer review fixes: a one-line file holding one bare message list, and
what reads as a tool error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.errors import InvalidTrajectory
from app.importers import convert
from app.importers.base import looks_like_error
from tests.importers.test_import_converters import OPENAI_CONVERSATION


def test_a_single_line_bare_message_list_is_one_conversation(tmp_path: Path) -> None:
    messages = OPENAI_CONVERSATION["messages"]
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps(messages) + "\n")
    got = [t for _, t in convert("openai-messages", src).records()]
    assert not any(isinstance(t, InvalidTrajectory) for t in got), got
    (traj,) = got
    assert (traj.case_id, traj.question) == ("line-1", "Weather in Lima?")
    assert [(c.name, c.observation) for c in traj.calls] == [
        ("get_weather", "Error: city must be a string"),
        ("get_weather", "18 C, cloudy"),
        ("get_forecast", '{"error": "no such tool"}'),
    ]
    # an array of conversations (envelopes or message lists) is still many conversations
    many = tmp_path / "many.json"
    many.write_text(json.dumps([messages, messages]))
    assert len(list(convert("openai-messages", many).records())) == 2


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Error: city must be a string", True),
        ("ERROR: upstream timeout", True),
        ("error: lower case too", True),
        ('{"error": "no such tool"}', True),
        ('{"error": null, "ok": true}', False),
        ("Error rate is 2%", False),
        ("Errors: none", False),
        ("error handling enabled", False),
        ("Exception: boom", True),
        ("Traceback (most recent call last):", True),
        ("", False),
    ],
)
def test_what_reads_as_a_tool_error(text: str, error: bool) -> None:
    assert looks_like_error(text) is error
