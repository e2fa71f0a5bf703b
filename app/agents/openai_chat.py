"""An OpenAI-compatible chat-completions tool loop (OpenAI, vLLM, Ollama,
llama.cpp server, LiteLLM…), through the official ``openai`` SDK.

The toolset goes to the model exactly as declared. Every tool call, several
per message included, is executed through the mock router; arguments are
passed on as the raw string the model wrote, so text that is not JSON is
recorded verbatim and fails the schema. The loop stops at ``max_steps``
model turns and records ``step_limit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.agents.model_agent import ModelAgent
from app.agents.retry import MalformedResponse
from app.core.router import Toolbox


@dataclass
class OpenAIChatAgent(ModelAgent):
    """``agent(question, toolbox) -> answer`` over chat completions."""

    label: str = "openai"
    KEY_VARIABLE = "OPENAI_API_KEY"

    def _make_client(self) -> Any:
        return openai_client(self)

    async def __call__(self, question: str, toolbox: Toolbox) -> str:
        from openai.types.chat import ChatCompletion as completion

        client = self.client()
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": question})
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if toolbox.tools:
            body["tools"] = toolbox.openai_tools
        if self.temperature is not None:
            body["temperature"] = self.temperature
        last_text = ""
        for _ in range(self.max_steps):
            # the body goes out exactly as built: the toolset as declared, and none of the SDK's
            # per-request type transform (the costliest part of a request at high concurrency)
            async def request() -> Any:
                response = await client.post("/chat/completions", body=body, cast_to=completion)
                if not response.choices:
                    raise MalformedResponse("the endpoint answered without choices")
                return response

            response = await self.retry.run(request)
            message = response.choices[0].message
            last_text = message.content or ""
            calls = [c for c in (message.tool_calls or []) if getattr(c, "function", None) is not None]
            if not calls:
                return last_text
            messages.append({
                "role": "assistant",
                "content": message.content,
                "tool_calls": [{"id": c.id, "type": "function",
                                "function": {"name": c.function.name, "arguments": c.function.arguments}}
                               for c in calls],
            })
            for c in calls:
                observation = await toolbox.acall(c.function.name, c.function.arguments)
                messages.append({"role": "tool", "tool_call_id": c.id, "content": observation})
        toolbox.stop("step_limit")
        return last_text


def openai_client(settings: ModelAgent) -> Any:
    """An async OpenAI client for these endpoint settings (retries are ours)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=settings.base_url, api_key=settings.key(), timeout=settings.timeout, max_retries=0)
