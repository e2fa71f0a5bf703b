"""BFCL's files as both readers take them (``bfcl``: question files; ``bfcl_results``: result
files): JSON lines, the possible-answer file beside a question file, a question's text."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import SuiteError
from app.core.records import loads


def answers_path(path: Path) -> Path | None:
    """The possible-answer file that goes with a question file, if any."""
    for candidate in (
        path.with_name(f"{path.stem}.possible_answer{path.suffix}"),
        path.parent / "possible_answer" / path.name,
        path.parent.parent / "possible_answer" / path.name,
    ):
        if candidate.is_file() and candidate != path:
            return candidate
    return None


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, loads(line)
                except ValueError as exc:
                    hint = " (truncated?)" if not line.endswith(b"\n") else ""
                    raise SuiteError(f"line {number}: not valid JSON{hint} ({exc})", path=str(path)) from None
    except FileNotFoundError:
        raise SuiteError("file not found", path=str(path)) from None


def _question_text(question: Any) -> str:
    turns = question if isinstance(question, list) else [question]
    texts: list[str] = []
    for turn in turns:
        for m in turn if isinstance(turn, list) else [turn]:
            if isinstance(m, Mapping) and m.get("role") == "user" and isinstance(m.get("content"), str):
                texts.append(m["content"])
            elif isinstance(m, str):
                texts.append(m)
    return "\n".join(texts)


def _is_multi_turn(q: Any, path: Path) -> bool:
    return "multi_turn" in path.name or (isinstance(q, Mapping) and ("involved_classes" in q or "initial_config" in q))
