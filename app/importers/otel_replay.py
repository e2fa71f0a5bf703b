"""Replaying a chat conversation as OpenTelemetry GenAI spans, through a real
tracer: one ``invoke_agent`` root span, a ``chat`` span per assistant
message and an ``execute_tool`` span per tool call (an ``Error: …`` result
sets the span's status to ERROR). The receiver's tests and benchmark use it;
the OpenTelemetry SDK is imported only here, when called.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.importers.base import content_text, looks_like_error


def _user(text: str) -> str:
    return json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}], ensure_ascii=False)


def _assistant(text: str) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}], ensure_ascii=False)


def replay_openai_messages(
    tracer: Any, messages: list[Any], *, attributes: Mapping[str, Any] | None = None, clock: list[int] | None = None
) -> int:
    """Emit the spans of one conversation; returns how many. ``clock`` (a
    one-item list of nanoseconds) gives strictly increasing timestamps."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    tick = clock if clock is not None else [1_700_000_000_000_000_000]

    def now() -> int:
        tick[0] += 1000
        return tick[0]

    used: set[int] = set()

    def result_of(call_id: Any, after: int) -> Mapping[str, Any]:
        """The first unused tool message for this id after the call (ids repeat in real logs)."""
        for j in range(after + 1, len(messages)):
            m = messages[j]
            if (
                j not in used
                and isinstance(m, Mapping)
                and m.get("role") == "tool"
                and m.get("tool_call_id") == call_id
            ):
                used.add(j)
                return m
        return {}

    count = 1
    root = tracer.start_span(
        "invoke_agent", start_time=now(), attributes={"gen_ai.operation.name": "invoke_agent", **(attributes or {})}
    )
    ctx = trace.set_span_in_context(root)
    last_user = ""
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            continue
        if m.get("role") == "user":
            last_user = content_text(m.get("content"))
            continue
        if m.get("role") != "assistant":
            continue
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat"}
        if last_user:
            attrs["gen_ai.input.messages"] = _user(last_user)
            last_user = ""
        text = content_text(m.get("content"))
        if text:
            attrs["gen_ai.output.messages"] = _assistant(text)
        chat = tracer.start_span("chat", context=ctx, start_time=now(), attributes=attrs)
        chat.end(end_time=now())
        count += 1
        for tc in m.get("tool_calls") or ():
            fn = tc.get("function") or {}
            result = result_of(tc.get("id"), i)
            output = content_text(result.get("content")) if result else None
            tattrs: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": fn.get("name", ""),
                "gen_ai.tool.call.id": tc.get("id", ""),
                "gen_ai.tool.call.arguments": fn.get("arguments") or "{}",
            }
            if output is not None:
                tattrs["gen_ai.tool.call.result"] = output
            tool = tracer.start_span(
                f"execute_tool {fn.get('name', '')}", context=ctx, start_time=now(), attributes=tattrs
            )
            if looks_like_error(output):
                tool.set_status(Status(StatusCode.ERROR, output))
            tool.end(end_time=now())
            count += 1
    root.end(end_time=now())
    return count
