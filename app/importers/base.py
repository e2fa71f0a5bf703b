"""What every converter hands back: a suite document and a re-readable stream
of trajectory records (docs/formats.md), each tagged with the source line it came from.

A record that cannot be converted is yielded as an ``InvalidTrajectory`` (it
names the file, the line and the field) instead of being raised, so the
store's import can list every bad line, store nothing, or skip them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory, ToolLensError
from app.core.records import Trajectory, parse_record

Converted = tuple[int, Trajectory | InvalidTrajectory]
"""(1-based line of the source, the record or why it could not be made)."""

RecordSource = Callable[[], Iterator[Converted]]
"""A fresh pass over the source each time it is called (import reads twice)."""


class UnknownFormat(ToolLensError):
    """``--from`` / ``--format`` names no registered converter."""


@dataclass(frozen=True)
class Options:
    """What the command line passes to a converter."""

    tools: Path | None = None  # a tool-schema file (list, {"tools": [...]}, or {domain: [...]})
    domain: str | None = None  # which domain of a multi-domain schema file
    group_by: str | None = None  # otel: the attribute whose value makes one trajectory of several traces
    questions: Path | None = None  # bfcl: a result file's question file, or the folder that holds it


@dataclass
class Conversion:
    """A converted source: the suite (self-contained: toolset inline) and the
    trajectory records. ``extra_suites`` holds further suites when the source
    declares the same tool name with different contracts (BFCL)."""

    suite: dict[str, Any]
    records: RecordSource
    extra_suites: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def record_or_reason(
    line: int, build: Callable[[], dict[str, Any]], *, source: str, what: str, field: str = ""
) -> Converted:
    """The record ``build`` makes, checked, or why it cannot be made (never raised)."""
    try:
        return line, parse_record(build(), index=line, source=source)
    except InvalidTrajectory as exc:
        return line, exc
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a shape no rule expected
        return line, InvalidTrajectory(
            f"cannot read this {what} ({type(exc).__name__}: {str(exc)[:200]})", index=line, field=field, source=source
        )


def distinct_trials(records: RecordSource, notes: list[str]) -> RecordSource:
    """The records with each (case, trial, fault) once: a source that repeats a case without
    telling trials apart (two conversations with one id, a scenario run twice) gives the repeat
    the next free trial, as the store keeps one trajectory per case, trial and fault. Each pass
    numbers alike; the first that renumbers adds a note to ``notes``."""

    def fresh() -> Iterator[Converted]:
        seen: set[tuple[str, int, str]] = set()
        moved = 0
        for line, item in records():
            if isinstance(item, Trajectory):
                fault = "" if item.fault is None else f"{item.fault.step}:{item.fault.kind}"
                if (item.case_id, item.trial, fault) in seen:
                    trial = item.trial + 1
                    while (item.case_id, trial, fault) in seen:
                        trial += 1
                    item.trial = trial
                    moved += 1
                seen.add((item.case_id, item.trial, fault))
            yield line, item
        note = (
            f"{moved} records repeat a case and trial of an earlier one (the source does not tell them apart): "
            "each takes the next free trial"
        )
        if moved and note not in notes:
            notes.append(note)

    return fresh


def no_records() -> Iterator[Converted]:
    """The record stream of a source that holds only a suite."""
    return iter(())


def call_error(message: str, kind: str = "error") -> dict[str, Any]:
    """A tool error observed at run time (not injected by ToolLens)."""
    return {"kind": kind, "message": message, "injected": False}


def looks_like_error(text: str | None) -> bool:
    """Tool results that report an error the way common agents write them:
    ``Error: …`` (tau-bench, many frameworks; any case), ``Exception: …``, a
    Python traceback, or a JSON object with a non-empty ``error`` field. Text
    that merely starts with the word ("Error rate is 2%") is not an error."""
    if not text:
        return False
    head = text.lstrip()[:40].lower()
    if head.startswith(("error:", "exception:", "traceback (most recent call last)")):
        return True
    if head.startswith("{") and '"error"' in text[:4096]:
        from app.core.records import loads

        try:
            data = loads(text)
        except ValueError:
            return False
        return isinstance(data, dict) and bool(data.get("error"))
    return False


def mark_batch(calls: list[dict[str, Any]], start: int) -> None:
    """Mark the calls one model response issued (``calls[start:]``) as one
    batch when there are several: ``"batch"`` is the first one's index
    (docs/formats.md). A batch's calls are not reactions to each other's errors."""
    if len(calls) - start > 1:
        for call in calls[start:]:
            call["batch"] = start


def content_text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of
    content blocks (OpenAI and Anthropic both use ``{"type": "text", "text"}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict) and "content" in block and block.get("type") == "tool_result":
                parts.append(content_text(block["content"]))
        return "\n".join(parts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    import json

    return json.dumps(content, ensure_ascii=False)
