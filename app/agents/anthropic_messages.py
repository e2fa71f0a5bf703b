"""An Anthropic messages tool loop (``tool_use`` / ``tool_result``), through
the official ``anthropic`` SDK. Same contract as the OpenAI loop: the toolset
as declared, every ``tool_use`` block executed through the mock router, its
error flagged with ``is_error``, and ``step_limit`` recorded."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from app.agents.retry import RetryPolicy
from app.core.router import Toolbox


@dataclass
class AnthropicAgent:
    """``agent(question, toolbox) -> answer`` over the messages API."""

    model: str
    base_url: str | None = None
    api_key: str | None = None
    system: str | None = None
    max_steps: int = 12
    max_tokens: int = 1024
    temperature: float | None = None
    timeout: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    label: str = "anthropic"
    _client: Any = field(default=None, init=False, repr=False)

    def client(self) -> Any:
        if self._client is None:
            from anthropic import AsyncAnthropic

            key = self.api_key or os.environ.get("ANTHROPIC_API_KEY") or "not-needed"
            self._client = AsyncAnthropic(base_url=self.base_url, api_key=key, timeout=self.timeout, max_retries=0)
        return self._client

    async def __call__(self, question: str, toolbox: Toolbox) -> str:
        from anthropic.types import Message as message_type

        client = self.client()
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": messages}
        if toolbox.tools:
            body["tools"] = toolbox.anthropic_tools  # as declared; sent without the SDK's type transform
        if self.system:
            body["system"] = self.system
        if self.temperature is not None:
            body["temperature"] = self.temperature
        last_text = ""
        for _ in range(self.max_steps):
            response = await self.retry.run(lambda: client.post("/v1/messages", body=body, cast_to=message_type))
            blocks = list(response.content)
            last_text = "".join(b.text for b in blocks if b.type == "text")
            uses = [b for b in blocks if b.type == "tool_use"]
            if not uses:
                return last_text
            messages.append({"role": "assistant", "content": [_block(b) for b in blocks]})
            results = []
            for use in uses:
                observation = await toolbox.acall(use.name, use.input)
                results.append({"type": "tool_result", "tool_use_id": use.id, "content": observation,
                                "is_error": toolbox.last_failed})
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
