"""Retries against the model endpoint, kept apart from injected tool faults.

A model endpoint that answers 429/5xx or times out is an infrastructure
problem, never the agent's failure: the call is retried with exponential
backoff (honouring ``Retry-After``), and when the attempts run out the case is
recorded as an infrastructure error instead of a failed case. A client error
(bad key, unknown model, a 400) stops the run: retrying cannot fix it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from app.core.errors import InfrastructureError, ToolLensError

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
FATAL_STATUS = frozenset({401, 402, 403, 404})  # a bad key, no credit, no such model: no case can run


class EndpointError(InfrastructureError):
    """The model endpoint kept failing: the case is an infrastructure error."""


class EndpointRejected(ToolLensError):
    """The model endpoint refuses every request (401, 403, 404): the run cannot go on."""


class MalformedResponse(Exception):
    """A 200 answer without the parts a response must have (e.g. no choices): retried as an endpoint fault."""


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def is_retryable(exc: BaseException) -> bool:
    """429, 408/409/425 and 5xx answers, timeouts and dropped connections."""
    status = status_of(exc)
    if status is not None:
        return status in RETRYABLE_STATUS or status >= 500
    name = type(exc).__name__
    return isinstance(exc, (TimeoutError, ConnectionError, MalformedResponse)) or name in {
        "APITimeoutError",
        "APIConnectionError",
        "APIResponseValidationError",
    }


def describe(exc: BaseException) -> str:
    status = status_of(exc)
    text = str(exc).strip().splitlines()
    head = text[0][:300] if text else ""
    return f"{type(exc).__name__}" + (f" {status}" if status else "") + (f": {head}" if head else "")


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = float(headers.get("retry-after", ""))
    except (TypeError, ValueError):
        return None
    return value if 0 <= value <= 600 else None


@dataclass
class RetryPolicy:
    """Exponential backoff with full jitter; ``attempts`` counts the first try."""

    attempts: int = 5
    base: float = 0.5
    cap: float = 20.0
    retries: int = field(default=0, init=False)  # retries made so far, across calls (for the summary)
    _rng: random.Random = field(default_factory=random.Random, init=False, repr=False)

    def delay(self, attempt: int, exc: BaseException) -> float:
        hinted = _retry_after(exc)
        if hinted is not None:
            return min(hinted, self.cap)
        return self._rng.uniform(0, min(self.cap, self.base * 2**attempt))

    async def run(self, request: Callable[[], Awaitable[T]]) -> T:
        """Await ``request()``; retry what is retryable; raise EndpointError or
        EndpointRejected with the last error's description."""
        for attempt in range(self.attempts):
            try:
                return await request()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not is_retryable(exc):
                    status = status_of(exc)
                    if status in FATAL_STATUS:
                        raise EndpointRejected(f"the model endpoint refused the request: {describe(exc)}") from exc
                    if status is not None:  # this case's request (too long a context, say): this case only
                        raise EndpointError(f"the model endpoint refused this case's request: {describe(exc)}") from exc
                    raise
                if attempt + 1 >= self.attempts:
                    raise EndpointError(f"model endpoint failed {self.attempts} times: {describe(exc)}") from exc
                self.retries += 1
                await asyncio.sleep(self.delay(attempt, exc))
        raise AssertionError("unreachable")  # pragma: no cover
