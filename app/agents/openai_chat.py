"""An OpenAI-compatible chat-completions tool loop (OpenAI, vLLM, Ollama,
llama.cpp server, LiteLLM…), through the official ``openai`` SDK.

The toolset goes to the model exactly as declared. Every tool call, several
per message included, is executed through the mock router; arguments are
passed on as the raw string the model wrote, so text that is not JSON is
recorded verbatim and fails the schema. The loop stops at ``max_steps``
model turns and records ``step_limit``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import orjson

from app.agents.model_agent import ModelAgent, tls_context
from app.agents.retry import MalformedResponse
from app.core.run.router import Toolbox
from app.core.usage_formats import openai_model_call


@dataclass
class OpenAIChatAgent(ModelAgent):
    """``agent(question, toolbox) -> answer`` over chat completions."""

    label: str = "openai"
    KEY_VARIABLE = "OPENAI_API_KEY"
    SDK_MODULES = ("openai", "aiohttp")

    def _make_client(self) -> Any:
        return openai_client(self)

    async def __call__(self, question: str, toolbox: Toolbox) -> str:
        return await self.new_conversation()(question, toolbox)

    def new_conversation(self) -> _Conversation:
        """One conversation: every turn sends the whole history (the user's
        messages, the assistant's, its tool calls and their results)."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system}] if self.system else []
        return _Conversation(self, messages)


@dataclass
class _Conversation:
    agent: OpenAIChatAgent
    messages: list[dict[str, Any]]

    async def __call__(self, user_message: str, toolbox: Toolbox) -> str:
        agent, messages = self.agent, self.messages
        client = agent.client()
        messages.append({"role": "user", "content": user_message})
        body: dict[str, Any] = {"model": agent.model, "messages": messages}
        if toolbox.tools:
            body["tools"] = toolbox.openai_tools
        if agent.temperature is not None:
            body["temperature"] = agent.temperature
        last_text = ""
        for _ in range(agent.max_steps):
            # The body goes out exactly as built (the toolset as declared, none of the SDK's
            # per-request type transform), encoded once per turn. The answer comes back as bytes,
            # read here: the SDK's response models cost more than the rest of a turn at high concurrency.
            payload = agent.post_args(body)

            async def request(payload: dict[str, Any] = payload) -> tuple[dict[str, Any], Any, float]:
                started = time.perf_counter()  # per attempt: the latency of the one that answered
                raw = await client.post("/chat/completions", cast_to=bytes, **payload)
                data = _decode(raw)
                return message_of(data), data, (time.perf_counter() - started) * 1000

            message, data, latency = await agent.retry.run(request)
            toolbox.record_model_call(openai_model_call(data, agent.model, latency))
            content = message.get("content")
            last_text = message_text(content)
            calls = tool_calls(message)
            if not calls:
                messages.append({"role": "assistant", "content": last_text})
                return last_text
            messages.append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                        for call_id, name, arguments in calls
                    ],
                }
            )
            for call_id, name, arguments in calls:
                observation = await toolbox.acall(name, arguments)
                messages.append({"role": "tool", "tool_call_id": call_id, "content": observation})
        toolbox.stop("step_limit")
        return last_text


def _decode(raw: bytes) -> Any:
    """JSON as the SDK would read it (a BOM, lone surrogate escapes), fast when it is plain."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError):
        raise MalformedResponse("the endpoint answered with text that is not JSON") from None


def message_text(content: Any) -> str:
    """A message's text: a string, or the text parts some OpenAI-compatible servers send as a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def first_message(raw: bytes) -> dict[str, Any]:
    """The first choice's message of a chat-completions answer, or MalformedResponse."""
    return message_of(_decode(raw))


def message_of(data: Any) -> dict[str, Any]:
    """The first choice's message of a decoded chat-completions answer, or MalformedResponse."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        raise MalformedResponse("the endpoint answered without choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise MalformedResponse("the endpoint's first choice has no message")
    return message


def tool_calls(message: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(id, name, arguments) of the message's function calls, arguments as the model wrote them."""
    out = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            name = function.get("name")
            if not isinstance(name, str) or not name:
                raise MalformedResponse("the endpoint answered with a tool call without a function name")
            out.append((str(call.get("id") or ""), name, function.get("arguments")))
    return out


def openai_client(settings: ModelAgent) -> Any:
    """An async OpenAI client for these endpoint settings (retries are ours), on the SDK's
    aiohttp transport: at high concurrency it costs far less CPU per request than the default."""
    from openai import AsyncOpenAI, DefaultAioHttpClient

    return AsyncOpenAI(
        base_url=settings.base_url,
        api_key=settings.key(),
        timeout=settings.timeout,
        max_retries=0,
        http_client=DefaultAioHttpClient(timeout=settings.timeout, verify=tls_context()),
    )
