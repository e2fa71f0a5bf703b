"""``anthropic-messages``: Messages API conversations.

Assistant ``tool_use`` blocks are the calls; user ``tool_result`` blocks,
matched by ``tool_use_id``, their results; ``is_error: true`` (or a result
that reads as an error) makes a non-injected error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core.usage_formats import logged_model_call
from app.importers.base import Conversion, Options, call_error, content_text, looks_like_error, mark_batch
from app.importers.chat import convert_chat

NAME = "anthropic-messages"


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def messages_to_record(messages: list[Any]) -> dict[str, Any]:
    """The record fields of one conversation: question, calls, answer, and the
    messages around the calls (an assistant message's text counts as said
    before its own tool calls)."""
    calls: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    said: list[dict[str, Any]] = []  # what the user and the agent said, and after how many calls
    question = ""
    answer = ""
    model_calls: list[dict[str, Any]] = []  # assistant messages that carry ``usage``
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        blocks = _blocks(m.get("content"))
        at = len(calls)
        if role == "user":
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "tool_result":
                    ref = b.get("tool_use_id")
                    call = by_id.pop(ref, None) if isinstance(ref, str) else None
                    if call is None:
                        continue
                    text = content_text(b.get("content"))
                    call["observation"] = text
                    if b.get("is_error") is True or looks_like_error(text):
                        call["error"] = call_error(text)
                elif b.get("type") == "text" and str(b.get("text") or "").strip():
                    question = question or str(b["text"])
                    said.append({"role": "user", "content": str(b["text"]), "calls_before": at})
        elif role == "assistant":
            usage = logged_model_call(m)
            if usage is not None:
                model_calls.append(usage.to_dict())
            texts = []
            start = len(calls)
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "tool_use":
                    call = {
                        "name": b.get("name") if isinstance(b.get("name"), str) else "",
                        "arguments": b.get("input"),
                        "observation": None,
                        "error": None,
                    }
                    calls.append(call)
                    if isinstance(b.get("id"), str):
                        by_id[b["id"]] = call
                elif b.get("type") == "text" and isinstance(b.get("text"), str):
                    texts.append(b["text"])
            mark_batch(calls, start)
            if "".join(texts).strip():
                answer = "\n".join(texts)
                said.append({"role": "assistant", "content": answer, "calls_before": at})
    record = {"question": question, "calls": calls, "answer": answer, "messages": said}
    if model_calls:
        record["model_calls"] = model_calls
    return record


def convert(path: Path, options: Options) -> Conversion:
    return convert_chat(path, options, fmt=NAME, to_record=messages_to_record)
