"""``otel``: OpenTelemetry traces of an agent, as trajectories.

One trace is one trajectory. Tool calls are the GenAI semantic-convention
``execute_tool`` spans (``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``) or the
OpenInference ``TOOL`` spans Phoenix records (``tool.name``, ``input.value``,
``output.value``), in start-time order; a span whose status is ERROR (or whose
result reads as an error) is a call with a non-injected error. The question
and the answer come from the messages of the model spans (``gen_ai.input.messages``
/ ``gen_ai.output.messages``, the older ``gen_ai.prompt.N`` /
``gen_ai.completion.N``, OpenInference's ``llm.input_messages.N``) or the
agent span's ``input.value`` / ``output.value``.

Spans are read from an OTLP JSON file (JSON Lines of export requests, or one
request); the span model and its decoders (also of the live receiver's bodies)
are ``app.otlp.spans``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory
from app.core.keys import whole_key
from app.core.records import MAX_CALLS, MAX_INDEX, MAX_NAME, loads, parse_record
from app.core.usage import MAX_MODEL_CALLS, MAX_TOKENS
from app.importers.base import Conversion, Converted, Options, call_error, content_text, looks_like_error
from app.importers.jsonstream import iter_json_values
from app.importers.toolsets import resolve_toolset
from app.otlp.spans import STATUS_ERROR, Span, is_tool_span, json_keyed, regroup

NAME = "otel"
# -- spans -> trajectory ----------------------------------------------------------


def _tool_name(span: Span) -> str:
    a = span.attributes
    for key in ("gen_ai.tool.name", "tool.name", "traceloop.entity.name"):
        if isinstance(a.get(key), str) and a[key]:
            return str(a[key])[:MAX_NAME]
    return span.name.removeprefix("execute_tool").removesuffix(".tool").strip()[:MAX_NAME]


def _traceloop_input(value: Any) -> Any:
    """Traceloop's ``traceloop.entity.input`` of a decorated function: ``{"args": [...],
    "kwargs": {...}}``; the keyword arguments are the call's arguments (with positional
    ones too, the whole object is)."""
    data = _maybe_json(value)
    if isinstance(data, Mapping) and set(data) <= {"args", "kwargs"}:
        args, kwargs = data.get("args"), data.get("kwargs")
        if not args and isinstance(kwargs, Mapping):
            return dict(kwargs)
    return data


def _traceloop_output(value: Any) -> Any:
    """Traceloop's ``traceloop.entity.output``: the return value as JSON (a string returned is a JSON string)."""
    data = _maybe_json(value)
    return data if isinstance(data, str) else value


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return loads(value)
        except ValueError:
            return value
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def duration_ms(span: Span) -> float | None:
    """The span's wall time, when it has both ends."""
    if span.start <= 0 or span.end < span.start:
        return None
    return round((span.end - span.start) / 1e6, 3)


MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
_INPUT_TOKENS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
_OUTPUT_TOKENS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
_CACHED_TOKENS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_MODEL = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")


def is_model_span(span: Span) -> bool:
    """A request to the model: a GenAI ``chat``-like operation, an OpenInference
    ``LLM`` span, or a span with token counts that is neither a tool's nor an
    agent's (an agent span's counts sum its requests: counting them would count twice)."""
    a = span.attributes
    op = a.get("gen_ai.operation.name")
    kind = a.get("openinference.span.kind")
    if op in MODEL_OPERATIONS or kind == "LLM":
        return True
    if op is not None or kind is not None or is_tool_span(span):
        return False
    return any(k in a for k in (*_INPUT_TOKENS, *_OUTPUT_TOKENS, "llm.token_count.total"))


def _first(a: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((a[k] for k in keys if k in a), None)


def _tokens(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value < MAX_TOKENS else None


def model_call(span: Span) -> dict[str, Any]:
    """A ``model_calls`` entry (docs/formats.md) of a model span: its model, token counts and duration."""
    a = span.attributes
    model = _first(a, _MODEL)
    entry: dict[str, Any] = {"model": model[:256]} if isinstance(model, str) and model else {}
    counts = {
        "input_tokens": _tokens(_first(a, _INPUT_TOKENS)),
        "output_tokens": _tokens(_first(a, _OUTPUT_TOKENS)),
        "cached_tokens": _tokens(_first(a, _CACHED_TOKENS)),
    }
    if counts["input_tokens"] is None and counts["output_tokens"] is None:
        counts["total_tokens"] = _tokens(a.get("llm.token_count.total", a.get("gen_ai.usage.total_tokens")))
    entry.update((k, v) for k, v in counts.items() if v is not None)
    latency = duration_ms(span)
    if latency is not None:
        entry["latency_ms"] = latency
    return entry


def tool_call(span: Span) -> dict[str, Any]:
    """A call of a trajectory record from a tool span."""
    a = span.attributes
    args = a.get("gen_ai.tool.call.arguments", a.get("input.value"))
    output = a.get("gen_ai.tool.call.result", a.get("output.value"))
    if args is None and "traceloop.entity.input" in a:
        args = _traceloop_input(a["traceloop.entity.input"])
    if output is None and "traceloop.entity.output" in a:
        output = _traceloop_output(a["traceloop.entity.output"])
    if args is None:
        args = {}
    result = _text(output)
    call: dict[str, Any] = {"name": _tool_name(span), "arguments": args, "observation": result, "error": None}
    if span.status_code == STATUS_ERROR:
        message = span.status_message
        for name, attrs in span.events:
            if name == "exception" and not message:
                message = str(attrs.get("exception.message") or attrs.get("exception.type") or "")
        kind = a.get("error.type")
        call["error"] = call_error(message or result or "error", kind=str(kind)[:40] if kind else "error")
    elif looks_like_error(result):
        call["error"] = call_error(result or "")
    latency = duration_ms(span)
    if latency is not None:
        call["latency_ms"] = latency
    return call


def _messages(value: Any) -> list[Mapping[str, Any]]:
    data = _maybe_json(value)
    if isinstance(data, Mapping):
        data = data.get("messages")
    return [m for m in data if isinstance(m, Mapping)] if isinstance(data, list) else []


def _message_text(m: Mapping[str, Any]) -> str:
    if "parts" in m and isinstance(m["parts"], list):  # GenAI semconv: {role, parts: [{type: text, content}]}
        return "\n".join(
            str(p.get("content") or "") for p in m["parts"] if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return content_text(m.get("content"))


def _indexed(a: Mapping[str, Any], prefix: str, role_key: str, content_key: str) -> list[Mapping[str, Any]]:
    """Flattened messages: ``gen_ai.prompt.0.role`` / ``llm.input_messages.0.message.content``."""
    out: list[Mapping[str, Any]] = []
    i = 0
    while f"{prefix}.{i}.{content_key}" in a or f"{prefix}.{i}.{role_key}" in a:
        out.append({"role": a.get(f"{prefix}.{i}.{role_key}"), "content": a.get(f"{prefix}.{i}.{content_key}")})
        i += 1
    return out


def _inputs(a: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return (
        _messages(a.get("gen_ai.input.messages"))
        or _indexed(a, "gen_ai.prompt", "role", "content")
        or _indexed(a, "llm.input_messages", "message.role", "message.content")
    )


def _outputs(a: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return (
        _messages(a.get("gen_ai.output.messages"))
        or _indexed(a, "gen_ai.completion", "role", "content")
        or _indexed(a, "llm.output_messages", "message.role", "message.content")
    )


# -- the conversation a model span saw: calls rebuilt when no tool span was recorded -----


def _from_parts(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A GenAI semconv message (``{role, parts: [...]}``) as chat-completions messages:
    ``tool_call`` parts are the assistant's ``tool_calls``, each ``tool_call_response``
    part a ``role: tool`` message."""
    parts = [p for p in m.get("parts") or () if isinstance(p, Mapping)]
    text = "\n".join(str(p.get("content") or "") for p in parts if p.get("type") == "text")
    calls = [
        {"id": p.get("id"), "function": {"name": p.get("name"), "arguments": p.get("arguments")}}
        for p in parts
        if p.get("type") == "tool_call"
    ]
    out: list[dict[str, Any]] = []
    if m.get("role") != "tool" or text:
        out.append({"role": m.get("role"), "content": text, "tool_calls": calls})
    out.extend(
        {"role": "tool", "tool_call_id": p.get("id"), "content": _text(p.get("response"))}
        for p in parts
        if p.get("type") == "tool_call_response"
    )
    return out


def _chat(messages: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages of either GenAI shape as chat-completions messages (``message`` of a
    choice unwrapped)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m.get("message"), Mapping) and "role" not in m:
            m = m["message"]
        if isinstance(m.get("parts"), list):
            out.extend(_from_parts(m))
        else:
            plain = dict(m)
            if not isinstance(plain.get("tool_calls"), list):  # a trace may hold anything there
                plain.pop("tool_calls", None)
            out.append(plain)
    return out


def _flat(
    a: Mapping[str, Any], prefix: str, inner: str, call_name: str, call_args: str, call_id: str
) -> list[dict[str, Any]]:
    """Flattened messages with their tool calls: OpenInference's
    ``llm.input_messages.N.message.tool_calls.M.tool_call.function.name``, Traceloop's
    ``gen_ai.prompt.N.tool_calls.M.name``."""
    out: list[dict[str, Any]] = []
    for i in range(MAX_CALLS):
        p = f"{prefix}.{i}.{inner}"
        if f"{p}role" not in a and f"{p}content" not in a:
            break
        content = a.get(f"{p}content")
        if content is None:  # OpenInference: message.contents.M.message_content.text
            texts = []
            for j in range(MAX_CALLS):
                c = f"{p}contents.{j}.message_content."
                if f"{c}type" not in a and f"{c}text" not in a:
                    break
                texts.append(str(a.get(f"{c}text") or ""))
            content = "\n".join(texts)
        calls = []
        for j in range(MAX_CALLS):
            c = f"{p}tool_calls.{j}."
            if f"{c}{call_name}" not in a and f"{c}{call_id}" not in a:
                break
            calls.append(
                {
                    "id": a.get(f"{c}{call_id}"),
                    "function": {"name": a.get(f"{c}{call_name}"), "arguments": a.get(f"{c}{call_args}")},
                }
            )
        m: dict[str, Any] = {"role": a.get(f"{p}role"), "content": content, "tool_calls": calls}
        if f"{p}tool_call_id" in a:
            m["tool_call_id"] = a[f"{p}tool_call_id"]
        out.append(m)
    return out


def _event_messages(events: list[tuple[str, dict[str, Any]]], output: bool) -> list[dict[str, Any]]:
    """The older GenAI span events: ``gen_ai.content.prompt`` / ``gen_ai.content.completion``
    (a JSON list in ``gen_ai.prompt`` / ``gen_ai.completion``), or one event per message
    (``gen_ai.user.message``, ``gen_ai.assistant.message``, ``gen_ai.tool.message``, ``gen_ai.choice``)."""
    out: list[dict[str, Any]] = []
    for name, attrs in events:
        if name == ("gen_ai.content.completion" if output else "gen_ai.content.prompt"):
            out.extend(_chat(_messages(attrs.get("gen_ai.completion" if output else "gen_ai.prompt"))))
        elif output and name == "gen_ai.choice":
            message = _maybe_json(attrs.get("message"))
            if isinstance(message, Mapping):
                out.extend(_chat([{"role": "assistant", **message}]))
        elif not output and name.startswith("gen_ai.") and name.endswith(".message"):
            role = name.removeprefix("gen_ai.").removesuffix(".message")
            calls = _maybe_json(attrs.get("tool_calls"))
            m = {
                "role": role,
                "content": _maybe_json(attrs.get("content")),
                "tool_calls": calls if isinstance(calls, list) else [],
            }
            if role == "tool":
                m["tool_call_id"] = attrs.get("id")
            out.append(m)
    return out


def conversation(span: Span) -> list[dict[str, Any]]:
    """What a model span saw and said, as chat-completions messages: its input
    history, then its output (GenAI message parts, OpenInference's or Traceloop's
    flattened messages, or the older GenAI events)."""
    a = span.attributes
    inputs = (
        _chat(_messages(a.get("gen_ai.input.messages")))
        or _flat(
            a,
            "llm.input_messages",
            "message.",
            "tool_call.function.name",
            "tool_call.function.arguments",
            "tool_call.id",
        )
        or _flat(a, "gen_ai.prompt", "", "name", "arguments", "id")
        or _event_messages(span.events, False)
    )
    outputs = (
        _chat(_messages(a.get("gen_ai.output.messages")))
        or _flat(
            a,
            "llm.output_messages",
            "message.",
            "tool_call.function.name",
            "tool_call.function.arguments",
            "tool_call.id",
        )
        or _flat(a, "gen_ai.completion", "", "name", "arguments", "id")
        or _event_messages(span.events, True)
    )
    return inputs + [m if m.get("role") else {**m, "role": "assistant"} for m in outputs]


def rebuilt(spans: list[Span]) -> dict[str, Any]:
    """The question, calls and answer of the conversation the last model span saw
    (its history holds every call before it; results matched by call id, as the
    ``openai-messages`` importer does); empty if no span holds messages."""
    from app.importers.openai_messages import messages_to_record

    for s in sorted(spans, key=lambda s: s.end, reverse=True):
        history = conversation(s)
        if history:
            return messages_to_record(history)
    return {}


def _tool_schemas(a: Mapping[str, Any]) -> list[Any]:
    """The tools a model span was offered: ``gen_ai.tool.definitions`` (a JSON list)
    or OpenInference's ``llm.tools.N.tool.json_schema``; Traceloop's
    ``llm.request.functions.N.{name, description, parameters}``."""
    tools = _maybe_json(a.get("gen_ai.tool.definitions"))
    if isinstance(tools, list):
        return [t for t in tools if isinstance(t, Mapping)]
    out: list[Any] = []
    for i in range(MAX_CALLS):
        if f"llm.tools.{i}.tool.json_schema" in a:
            tool = _maybe_json(a[f"llm.tools.{i}.tool.json_schema"])
        elif f"llm.request.functions.{i}.name" in a:
            p = f"llm.request.functions.{i}."
            tool = {
                "name": a[f"{p}name"],
                "description": a.get(f"{p}description") or "",
                "parameters": _maybe_json(a.get(f"{p}parameters")) or {"type": "object"},
            }
        else:
            break
        if isinstance(tool, Mapping):
            out.append(tool)
    return out


def tool_definitions(spans: Iterable[Span]) -> dict[str, Any]:
    """Tool schemas the traces' model spans were offered, by name (the first seen wins)."""
    found: dict[str, Any] = {}
    for s in spans:
        for tool in _tool_schemas(s.attributes):
            fn = tool.get("function")
            body = fn if isinstance(fn, Mapping) else tool
            name = body.get("name")
            if isinstance(name, str) and name and name not in found:
                found[name] = {
                    "name": name,
                    "description": str(body.get("description") or ""),
                    "parameters": body.get("parameters") or {"type": "object"},
                }
    return found


def _question(root: Mapping[str, Any]) -> str:
    """The question of a trace whose model spans hold no user message: the root's
    input (an agent span's ``input.value``, a Traceloop workflow's first text argument)."""
    value = root.get("input.value") or root.get("gen_ai.prompt")
    if value is None and "traceloop.entity.input" in root:
        data = _maybe_json(root["traceloop.entity.input"])
        found: list[Any] = []
        if isinstance(data, Mapping):
            args, kwargs = data.get("args"), data.get("kwargs")
            found.extend(args if isinstance(args, list) else ())
            found.extend(kwargs.values() if isinstance(kwargs, Mapping) else ())
        value = next((v for v in found if isinstance(v, str)), None)
    return _text(value) or ""


def _said(value: Any, mime: Any) -> str:
    """A span's ``output.value`` as an answer: text as it is; a JSON payload (a chat
    completion, a response, ``{"output": ...}``) its assistant text, never the JSON."""
    data = _maybe_json(value) if mime == "application/json" or isinstance(value, str) else value
    if isinstance(data, str):
        return data
    if isinstance(data, Mapping):
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message")
            return content_text(message.get("content")) if isinstance(message, Mapping) else ""
        if isinstance(data.get("output_text"), str):
            return str(data["output_text"])
        for key in ("output", "answer", "content", "text"):
            if isinstance(data.get(key), str):
                return str(data[key])
        return ""
    if isinstance(data, list):
        return ""
    return "" if value is None else str(value)


def trajectory_record(spans: Iterable[Span], notes: list[str] | None = None) -> dict[str, Any]:
    """The trajectory record (docs/formats.md) of one trace's spans (in any order).

    What a trace supplies never makes the record unreadable: a ``toollens.trial``
    that is not an integer from 0 up, or a ``toollens.reward`` that is not a
    number, is left out; a trace with more than ``MAX_CALLS`` tool spans keeps
    the first ones and says ``"stopped": "call_limit"``. Each such repair is
    appended to ``notes``."""
    notes = [] if notes is None else notes
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    if not ordered:
        raise ValueError("a trace without spans")
    tools: list[Span] = []
    chat: list[Span] = []
    for s in ordered:
        (tools if is_tool_span(s) else chat).append(s)
    history = {} if tools else rebuilt(chat)
    calls = [tool_call(s) for s in tools] if tools else list(history.get("calls") or [])
    cut = len(calls) > MAX_CALLS
    if cut:
        notes.append(f"{len(calls)} tool spans: the first {MAX_CALLS} kept")
        del calls[MAX_CALLS:]
    question = answer = ""
    for s in chat:
        user = next((_message_text(m) for m in _inputs(s.attributes) if m.get("role") == "user"), "")
        if user.strip():
            question = user
            break
    # the answer: the last thing said by the span that ended last (of those that said something);
    # read from the latest span back, so that only the spans after the answer are decoded
    for _, s in sorted(enumerate(chat), key=lambda p: (p[1].end, p[0]), reverse=True):
        said = [_message_text(m) for m in _outputs(s.attributes) if m.get("role") in ("assistant", None)]
        said = [t for t in said if t.strip()]
        if said:
            answer = said[-1]
            break
    roots = [s for s in ordered if s.is_root] or ordered[:1]
    root = roots[0].attributes
    if not question:
        question = str(history.get("question") or "") or _question(root)
    if not answer:
        answer = str(history.get("answer") or "")
    if not answer:
        answer = _said(root.get("output.value") or root.get("gen_ai.completion"), root.get("output.mime_type"))
    if not answer and "traceloop.entity.output" in root:  # a Traceloop workflow's return value
        answer = _said(_traceloop_output(root["traceloop.entity.output"]), None)

    def lookup(key: str) -> Any:
        """The root's attribute, else the first span's that has it."""
        if key in root:
            return root[key]
        return next((s.attributes[key] for s in ordered if key in s.attributes), None)

    case_id = lookup("toollens.case_id") or lookup("gen_ai.conversation.id") or lookup("session.id")
    trial = lookup("toollens.trial")
    reward = lookup("toollens.reward")
    if trial is not None and (type(trial) is not int or not 0 <= trial <= MAX_INDEX):
        notes.append(f"toollens.trial {str(trial)[:40]!r} ignored: not an integer from 0 to {MAX_INDEX}")
        trial = None
    if reward is not None and not (
        (type(reward) is float and math.isfinite(reward)) or (type(reward) is int and -(10**300) < reward < 10**300)
    ):
        notes.append(f"toollens.reward {str(reward)[:40]!r} ignored: not a finite number")
        reward = None
    record: dict[str, Any] = {
        "case_id": whole_key(str(case_id), MAX_NAME) if case_id not in (None, "") else ordered[0].trace_id or "trace",
        "trial": 0 if trial is None else trial,
        "question": question,
        "calls": calls,
        "answer": answer,
    }
    if reward is not None:
        record["reward"] = reward
    if cut:
        record["stopped"] = "call_limit"
    model_calls = [model_call(s) for s in chat if is_model_span(s)]
    if model_calls:
        record["model_calls"] = model_calls[:MAX_MODEL_CALLS]
    return record


def group_by_trace(spans: Iterable[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for s in spans:
        out.setdefault(s.trace_id, []).append(s)
    return out


# -- the file converter ------------------------------------------------------------


def convert(path: Path, options: Options) -> Conversion:
    """An OTLP JSON file: every trace (with ``group_by``, every conversation)
    becomes one trajectory record.

    Spans of one trace may be spread over the file's export requests, so the
    file is grouped in one pass (memory grows with the spans of the file, not
    only of one trace; OTLP files are exports, not multi-GB logs). Without
    ``--tools``, the tool schemas the model spans were offered are the toolset."""
    source = str(path)
    key = options.group_by

    def grouped() -> Iterator[tuple[int, dict[str, list[Span]] | InvalidTrajectory]]:
        keyed: list[tuple[Span, Any]] = []
        lines: list[int] = []
        for line, value in iter_json_values(path, whole_object=True):
            if isinstance(value, InvalidTrajectory):
                yield line, value
                continue
            try:
                found = json_keyed(value, key)
            except (ValueError, TypeError, AttributeError) as exc:
                yield line, InvalidTrajectory(str(exc), index=line, source=source)
                continue
            keyed.extend(found)
            lines.extend(line for _ in found)
        if key:
            regroup(keyed, key)  # over the whole file: a trace's spans without the key join its conversation
        traces: dict[str, list[Span]] = {}
        first_line: dict[str, int] = {}
        for (s, _), line in zip(keyed, lines, strict=True):
            first_line.setdefault(s.trace_id, line)
            traces.setdefault(s.trace_id, []).append(s)
        for trace_id, spans in traces.items():
            yield first_line[trace_id], {trace_id: spans}

    def records() -> Iterator[Converted]:
        for line, item in grouped():
            if isinstance(item, InvalidTrajectory):
                yield line, item
                continue
            ((trace_id, spans),) = item.items()
            try:
                yield line, parse_record(trajectory_record(spans), index=line, source=f"{source} trace {trace_id}")
            except InvalidTrajectory as exc:
                yield line, exc

    def called() -> set[str]:
        return {c.name for _, t in records() if not isinstance(t, InvalidTrajectory) for c in t.calls}

    def offered() -> list[Any]:
        spans = (
            s
            for _, item in grouped()
            if not isinstance(item, InvalidTrajectory)
            for group in item.values()
            for s in group
        )
        return list(tool_definitions(spans).values())

    toolset, notes = resolve_toolset(options.tools, options.domain, called, name=path.stem, offered=offered)
    suite = {"name": path.stem, "toolset": toolset, "cases": []}
    return Conversion(suite=suite, records=records, notes=notes)
