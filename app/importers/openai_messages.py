"""``openai-messages``: chat-completions message lists.

Assistant ``tool_calls`` (arguments as a JSON string, kept verbatim when it
does not parse) are matched to ``role: tool`` results by ``tool_call_id``;
the legacy ``function_call`` / ``role: function`` pair is matched by order
and name. A result that reports an error (``Error: …``, or an object with an
``error`` field) becomes a call with a non-injected error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core.usage_formats import logged_model_call
from app.importers.base import Conversion, Options, call_error, content_text, looks_like_error, mark_batch
from app.importers.chat import convert_chat

NAME = "openai-messages"


def _function(tc: Any) -> tuple[str, Any]:
    fn = tc.get("function") if isinstance(tc, dict) else None
    if not isinstance(fn, dict):
        fn = tc if isinstance(tc, dict) else {}
    name = fn.get("name")
    return (name if isinstance(name, str) else ""), fn.get("arguments")


def messages_to_record(messages: list[Any]) -> dict[str, Any]:
    """The record fields of one conversation: question, calls, answer, and
    the messages around the calls (so that what the agent said after an
    error can be told from what it said before)."""
    calls: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    legacy: list[dict[str, Any]] = []  # function_call calls still waiting for their result
    said: list[dict[str, Any]] = []  # what the user and the agent said, and after how many calls
    question = ""
    answer = ""
    model_calls: list[dict[str, Any]] = []  # assistant messages that carry ``usage``
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "user":
            text = content_text(m.get("content"))
            question = question or text
            if text.strip():
                said.append({"role": "user", "content": text, "calls_before": len(calls)})
        elif role == "assistant":
            usage = logged_model_call(m)
            if usage is not None:
                model_calls.append(usage.to_dict())
            text = content_text(m.get("content"))
            if text.strip():
                answer = text
                said.append({"role": "assistant", "content": text, "calls_before": len(calls)})
            start = len(calls)
            for tc in m.get("tool_calls") or ():
                name, args = _function(tc)
                call = {"name": name, "arguments": args, "observation": None, "error": None}
                calls.append(call)
                if isinstance(tc, dict) and isinstance(tc.get("id"), str):
                    by_id[tc["id"]] = call
            mark_batch(calls, start)
            if isinstance(m.get("function_call"), dict):
                name, args = _function(m["function_call"])
                call = {"name": name, "arguments": args, "observation": None, "error": None}
                calls.append(call)
                legacy.append(call)
        elif role == "tool":
            ref = m.get("tool_call_id")
            found = by_id.pop(ref, None) if isinstance(ref, str) else None
            if found is None:  # no id: the earliest call without a result
                found = next((c for c in calls if c["observation"] is None and c["error"] is None), None)
            if found is not None:
                _result(found, m)
        elif role == "function":
            pending = next((c for c in legacy if c["name"] == m.get("name")), legacy[0] if legacy else None)
            if pending is not None:
                legacy.remove(pending)
                _result(pending, m)
    record = {"question": question, "calls": calls, "answer": answer, "messages": said}
    if model_calls:
        record["model_calls"] = model_calls
    return record


def _result(call: dict[str, Any], message: dict[str, Any]) -> None:
    text = content_text(message.get("content"))
    call["observation"] = text
    if message.get("is_error") is True or looks_like_error(text):
        call["error"] = call_error(text)


def convert(path: Path, options: Options) -> Conversion:
    return convert_chat(path, options, fmt=NAME, to_record=messages_to_record)
