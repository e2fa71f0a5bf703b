"""What the model-endpoint agents share: the endpoint, the loop's limits,
the retry policy, and one SDK client per event loop, made on first use."""

from __future__ import annotations

import asyncio
import functools
import importlib
import itertools
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

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
    _client_loop: Any = field(default=None, init=False, repr=False)
    _keys: Iterator[int] = field(default_factory=itertools.count, init=False, repr=False)
    _key_prefix: str = field(default_factory=lambda: f"toollens-{secrets.token_hex(6)}", init=False, repr=False)

    KEY_VARIABLE = ""  # the environment variable holding the API key
    SDK_MODULES: ClassVar[tuple[str, ...]] = ()  # what the client needs, imported by preload()

    def key(self) -> str:
        """The key given, else the environment's; local servers accept any key."""
        return self.api_key or os.environ.get(self.KEY_VARIABLE, "") or "not-needed"

    def client(self) -> Any:
        """The SDK client of the running event loop (the SDK's own retries off:
        ours count them and keep them apart from injected tool faults). Its
        connections belong to one loop, so another loop gets a new client."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client, self._client_loop = self._make_client(), loop
        return self._client

    def post_args(self, body: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of one logical request to the SDK's ``post``,
        built once and reused by our retries: the body encoded by orjson
        (exactly the JSON the SDK would send, at a fraction of the cost; the
        SDK's encoder takes what orjson refuses, such as integers past 64 bits),
        and an idempotency key of our own, the same across retries (the SDKs
        would otherwise draw a uuid4 for every request)."""
        options = {"idempotency_key": f"{self._key_prefix}-{next(self._keys)}"}
        try:
            return {"content": orjson.dumps(body), "options": options}
        except TypeError:
            return {"body": body, "options": options}

    def preload(self) -> None:
        """Import the SDK and build a client once, ahead of the run's clock, so that a setting
        the SDK refuses stops the run before it starts (the client a run uses belongs to its loop)."""
        for module in self.SDK_MODULES:
            importlib.import_module(module)
        self._make_client()

    async def aclose(self) -> None:
        """Close the client's connections (in the loop that made it); the runner calls it at the end."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.close()

    def _make_client(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


@functools.cache
def tls_context() -> Any:
    """The TLS context every SDK client of this process verifies with: the SDKs' own default
    (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), built once. Building it reads the system's
    CA bundle, 20-30 ms of CPU that a client made for each run's event loop would spend with
    every case run in flight waiting; ``True`` (the SDK builds its own) if httpx2 is not there."""
    try:
        from httpx2 import create_ssl_context
    except ImportError:  # pragma: no cover - an SDK release on another HTTP stack
        return True
    return create_ssl_context()
