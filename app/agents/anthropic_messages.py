"""An Anthropic messages tool loop (``tool_use`` / ``tool_result``), through
the official ``anthropic`` SDK. Same contract as the OpenAI loop: the toolset
as declared, every ``tool_use`` block executed through the mock router, its
error flagged with ``is_error``, and ``step_limit`` recorded."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from app.agents.model_agent import ModelAgent, tls_context
from app.core.run.router import Toolbox
from app.core.usage_formats import anthropic_model_call


@dataclass
class AnthropicAgent(ModelAgent):
    """``agent(question, toolbox) -> answer`` over the messages API."""

    max_tokens: int = 1024
    label: str = "anthropic"
    KEY_VARIABLE = "ANTHROPIC_API_KEY"
    SDK_MODULES = ("anthropic", "aiohttp")

    def _make_client(self) -> Any:
        from anthropic import AsyncAnthropic, DefaultAioHttpClient

        return AsyncAnthropic(
            base_url=self.base_url,
            api_key=self.key(),
            timeout=self.timeout,
            max_retries=0,
            http_client=DefaultAioHttpClient(timeout=self.timeout, verify=tls_context()),
        )

    async def __call__(self, question: str, toolbox: Toolbox) -> str:
        return await self.new_conversation()(question, toolbox)

    def new_conversation(self) -> _Conversation:
        """One conversation: every turn sends the whole history (the user's
        messages, the assistant's blocks, ``tool_use`` and ``tool_result``)."""
        return _Conversation(self, [])


@dataclass
class _Conversation:
    agent: AnthropicAgent
    messages: list[dict[str, Any]]

    async def __call__(self, user_message: str, toolbox: Toolbox) -> str:
        from anthropic.types import Message as message_type

        agent, messages = self.agent, self.messages
        client = agent.client()
        messages.append({"role": "user", "content": user_message})
        body: dict[str, Any] = {"model": agent.model, "max_tokens": agent.max_tokens, "messages": messages}
        if toolbox.tools:
            body["tools"] = toolbox.anthropic_tools
        if agent.system:
            body["system"] = agent.system
        if agent.temperature is not None:
            body["temperature"] = agent.temperature
        last_text = ""
        for _ in range(agent.max_steps):
            payload = agent.post_args(body)  # as declared, without the SDK's type transform; encoded once
            request = partial(client.post, "/v1/messages", cast_to=message_type, **payload)

            async def timed(request: Any = request) -> tuple[Any, float]:
                started = time.perf_counter()  # per attempt: the latency of the one that answered
                return await request(), (time.perf_counter() - started) * 1000

            response, latency = await agent.retry.run(timed)
            toolbox.record_model_call(anthropic_model_call(response, agent.model, latency))
            blocks = list(response.content)
            last_text = "".join(b.text for b in blocks if b.type == "text")
            uses = [b for b in blocks if b.type == "tool_use"]
            if blocks:  # the answer stays in the history for the next user message
                messages.append({"role": "assistant", "content": [_block(b) for b in blocks]})
            if not uses:
                return last_text
            results = []
            for use in uses:
                observation = await toolbox.acall(use.name, use.input)
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": observation,
                        "is_error": toolbox.last_failed,
                    }
                )
            messages.append({"role": "user", "content": results})
        toolbox.stop("step_limit")
        return last_text


def _block(block: Any) -> dict[str, Any]:
    """An assistant content block sent back as the API expects it."""
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    dumped: dict[str, Any] = block.model_dump(exclude_none=True)
    return dumped
