"""A model request's usage as providers report it, turned into a ``ModelCall``.

OpenAI counts cached prompt tokens inside ``prompt_tokens``; Anthropic counts
cache reads and cache writes beside ``input_tokens``. The record's
``input_tokens`` is the whole prompt (cached tokens included) either way.
A count the response does not carry stays None. Objects are read by key or
by attribute, so an SDK's response object and its JSON read alike.
"""

from __future__ import annotations

from typing import Any

from app.core.usage import MAX_MS, MAX_TOKENS, ModelCall


def _int(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value < MAX_TOKENS else None


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _model(response: Any, fallback: str | None) -> str | None:
    served = _get(response, "model")
    return served[:256] if isinstance(served, str) and served else fallback


def _latency(value: Any) -> float | None:
    ok = type(value) in (int, float) and 0 <= value < MAX_MS
    return round(float(value), 3) if ok else None


def openai_model_call(response: Any, model: str | None = None, latency_ms: float | None = None) -> ModelCall:
    """From a chat-completions answer (or anything with its ``usage`` and ``model``)."""
    usage = _get(response, "usage")
    return ModelCall(
        model=_model(response, model),
        input_tokens=_int(_get(usage, "prompt_tokens")),
        output_tokens=_int(_get(usage, "completion_tokens")),
        cached_tokens=_int(_get(_get(usage, "prompt_tokens_details"), "cached_tokens")),
        latency_ms=_latency(latency_ms),
    )


def anthropic_model_call(response: Any, model: str | None = None, latency_ms: float | None = None) -> ModelCall:
    """From a messages answer (the SDK's ``Message`` or its JSON)."""
    usage = _get(response, "usage")
    fresh = _int(_get(usage, "input_tokens"))
    read = _int(_get(usage, "cache_read_input_tokens"))
    written = _int(_get(usage, "cache_creation_input_tokens"))
    parts = [v for v in (fresh, read, written) if v is not None]
    return ModelCall(
        model=_model(response, model),
        input_tokens=sum(parts) if parts else None,
        output_tokens=_int(_get(usage, "output_tokens")),
        cached_tokens=read,
        latency_ms=_latency(latency_ms),
    )


def logged_model_call(message: Any) -> ModelCall | None:
    """From a logged assistant message that carries ``usage`` (either provider's
    shape), with its ``model`` and a ``latency_ms`` when present; None without usage."""
    usage = _get(message, "usage")
    if not isinstance(usage, dict):
        return None
    latency = _get(message, "latency_ms")
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return openai_model_call(message, None, latency)
    if "input_tokens" in usage or "output_tokens" in usage:
        return anthropic_model_call(message, None, latency)
    return None
