"""Fake model endpoints for tests and benchmarks: an OpenAI-compatible
``/v1/chat/completions`` and an Anthropic ``/v1/messages``, as one small ASGI
app on loopback, answering from a script.

A script maps a question to its turns; the turn served is the number of
assistant messages already in the conversation. Errors can be queued per
question (an HTTP status, or ``"hang"`` to never answer in time), and every
request body is kept for assertions.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from tests.servers import serve_in_thread


@dataclass
class Turn:
    """One model answer: tool calls (name, arguments as a dict or raw text), or final text."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    text: str = ""
    input_tokens: int = 1  # the usage reported, cached tokens included
    output_tokens: int = 1
    cached_tokens: int = 0


@dataclass
class FakeLLM:
    scripts: dict[str, list[Turn]] = field(default_factory=dict)
    # question -> queued per request: a status, "hang", "empty", or 0 (answer normally)
    errors: dict[str, list[int | str]] = field(default_factory=dict)
    delay: float = 0.0  # seconds per model call
    hang_seconds: float = 5.0
    default: Turn = field(default_factory=lambda: Turn(text="ok"))
    responder: Callable[[dict[str, Any]], Turn] | None = None  # instead of the scripts: request -> turn
    requests: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the conversation ------------------------------------------------------

    def _turn(self, question: str, assistant_turns: int) -> Turn:
        script = self.scripts.get(question)
        if script is None:
            return self.default
        return script[assistant_turns] if assistant_turns < len(script) else Turn(text="(script ended)")

    def _failure(self, question: str) -> int | str | None:
        with self.lock:
            queue = self.errors.get(question)
            return (queue.pop(0) or None) if queue else None

    # -- ASGI --------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body or b"{}")
        with self.lock:
            self.requests.append(request)
            self.calls += 1
        path = scope["path"]
        messages = request.get("messages", [])
        question = _first_user_text(messages)
        failure = self._failure(question)
        if failure == "hang":
            await asyncio.sleep(self.hang_seconds)
        if self.delay:
            await asyncio.sleep(self.delay)
        if failure == "empty":
            await _reply(send, 200, {"id": "x", "object": "chat.completion", "created": 0, "model": "", "choices": []})
            return
        if isinstance(failure, int):
            await _reply(send, failure, {"error": {"message": f"scripted {failure}", "type": "server_error"}})
            return
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        turn = self.responder(request) if self.responder is not None else self._turn(question, turns)
        if path.endswith("/chat/completions"):
            await _reply(send, 200, _openai_body(request, turn, turns))
        elif path.endswith("/messages"):
            await _reply(send, 200, _anthropic_body(request, turn, turns))
        else:
            await _reply(send, 404, {"error": {"message": "not found"}})


def _first_user_text(messages: list[dict[str, Any]]) -> str:
    for m in messages:
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _arguments(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)


def _openai_body(request: dict[str, Any], turn: Turn, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = [
            {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": _arguments(args)}}
            for i, (name, args) in enumerate(turn.calls)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}],
        "usage": {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
            "prompt_tokens_details": {"cached_tokens": turn.cached_tokens},
        },
    }


def _anthropic_body(request: dict[str, Any], turn: Turn, n: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for i, (name, args) in enumerate(turn.calls):
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{n}_{i}",
                "name": name,
                "input": args if isinstance(args, dict) else {"raw": args},
            }
        )
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model", ""),
        "content": content,
        "stop_reason": "tool_use" if turn.calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": turn.input_tokens - turn.cached_tokens,
            "output_tokens": turn.output_tokens,
            "cache_read_input_tokens": turn.cached_tokens,
        },
    }


async def _reply(send: Any, status: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})


@contextmanager
def serve(app: FakeLLM) -> Iterator[str]:
    """Serve the fake on a loopback port in a thread; yields the base URL."""
    with serve_in_thread(
        app, log_level="error", backlog=2048, timeout_keep_alive=30, timeout_graceful_shutdown=1
    ) as url:
        yield url


def two_turns(request: dict[str, Any]) -> Turn:
    """A model that makes one tool call, then answers: the benchmark's agent."""
    if any(m.get("role") == "tool" for m in request.get("messages", [])):
        return Turn(text="Tu saldo es $142.900")
    return Turn(calls=[("buscar_cliente", {"rut": "12345678-9"})])


def benchmark_app() -> FakeLLM:
    """The benchmark's endpoint, for ``uvicorn --factory``: ``two_turns``, with
    ``TOOLLENS_FAKE_DELAY`` seconds per model call (default 0.05)."""
    return FakeLLM(responder=two_turns, delay=float(os.environ.get("TOOLLENS_FAKE_DELAY", "0.05")))


def main(argv: list[str]) -> None:
    """``python -m tests.fake_llm PORT DELAY [WORKERS]``: the benchmark's endpoint in its own
    process(es). With several workers (one socket, uvicorn's worker processes) a burst of
    concurrent calls is not queued behind one event loop, as it is not at a model provider."""
    port, delay = int(argv[0]), argv[1]
    workers = int(argv[2]) if len(argv) > 2 else 1
    os.environ["TOOLLENS_FAKE_DELAY"] = delay
    uvicorn.run(
        "tests.fake_llm:benchmark_app",
        factory=True,
        host="127.0.0.1",
        port=port,
        workers=workers,
        log_level="error",
        backlog=2048,
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
