"""What the model-endpoint agents share: the endpoint, the loop's limits,
the retry policy, and one SDK client made on first use."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from app.agents.retry import RetryPolicy


@dataclass
class ModelAgent:
    """Settings of a tool loop against a model endpoint; subclasses make the
    client (``_make_client``) and run the loop (``__call__``)."""

    model: str
    base_url: str | None = None
    api_key: str | None = None
    system: str | None = None
    max_steps: int = 12
    temperature: float | None = None
    timeout: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    _client: Any = field(default=None, init=False, repr=False)

    KEY_VARIABLE = ""  # the environment variable holding the API key

    def key(self) -> str:
        """The key given, else the environment's; local servers accept any key."""
        return self.api_key or os.environ.get(self.KEY_VARIABLE, "") or "not-needed"

    def client(self) -> Any:
        """The SDK client (the SDK's own retries off: ours count them and keep
        them apart from injected tool faults)."""
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError
