"""A model request's usage as the SDKs report it, turned into a ``ModelCall``.

OpenAI counts cached prompt tokens inside ``prompt_tokens``; Anthropic counts
cache reads and cache writes beside ``input_tokens``. The record's
``input_tokens`` is the whole prompt (cached tokens included) either way.
A count the response does not carry stays None.
"""

from __future__ import annotations

from typing import Any

from app.core.usage import MAX_TOKENS, ModelCall


def _int(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value < MAX_TOKENS else None


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def openai_usage(data: Any, model: str, latency_ms: float) -> ModelCall:
    """From a chat-completions answer (decoded JSON)."""
    usage = _get(data, "usage")
    served = _get(data, "model")
    return ModelCall(
        model=served if isinstance(served, str) and served else model,
        input_tokens=_int(_get(usage, "prompt_tokens")),
        output_tokens=_int(_get(usage, "completion_tokens")),
        cached_tokens=_int(_get(_get(usage, "prompt_tokens_details"), "cached_tokens")),
        latency_ms=round(latency_ms, 3),
    )


def anthropic_usage(response: Any, model: str, latency_ms: float) -> ModelCall:
    """From a messages answer (the SDK's ``Message`` or decoded JSON)."""
    usage = _get(response, "usage")
    fresh = _int(_get(usage, "input_tokens"))
    read = _int(_get(usage, "cache_read_input_tokens"))
    written = _int(_get(usage, "cache_creation_input_tokens"))
    parts = [v for v in (fresh, read, written) if v is not None]
    served = _get(response, "model")
    return ModelCall(
        model=served if isinstance(served, str) and served else model,
        input_tokens=sum(parts) if parts else None,
        output_tokens=_int(_get(usage, "output_tokens")),
        cached_tokens=read,
        latency_ms=round(latency_ms, 3),
    )
