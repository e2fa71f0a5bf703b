"""Settings read from the environment (``TOOLLENS_*``), never at import time."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """``TOOLLENS_DATABASE_URL``, ``TOOLLENS_API_TOKEN``, ``TOOLLENS_MAX_BODY_BYTES``,
    ``TOOLLENS_OTLP_WARM_START``, ``TOOLLENS_ALLOWED_HOSTS``, ``TOOLLENS_MCP_MAX_BODY_BYTES``, the OTLP
    receiver's bounds ``TOOLLENS_OTLP_MAX_TRACE_SPANS``, ``TOOLLENS_OTLP_MAX_BUFFERED_SPANS``,
    ``TOOLLENS_OTLP_MAX_TRACES``, ``TOOLLENS_OTLP_MAX_BUFFERED_BYTES`` (docs/otlp-receiver.md)."""

    model_config = SettingsConfigDict(env_prefix="TOOLLENS_", extra="ignore")

    database_url: str = "sqlite:///toollens.db"
    api_token: str | None = None
    max_body_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # mcp-serve's /toollens/end and /toollens/message (a message's content is cut at 100,000 characters)
    mcp_max_body_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    auto_migrate: bool = True
    # Host names the server answers, comma-separated ("*": any); empty: the loopback names and ``listen_host``
    allowed_hosts: str = ""
    listen_host: str | None = None  # the interface `toollens serve --host` listens on
    # the OTLP receiver's buffer: spans of one trace (or conversation), spans, traces and bytes in all
    otlp_max_trace_spans: int = Field(default=10_000, gt=0)
    otlp_max_buffered_spans: int = Field(default=500_000, gt=0)
    otlp_max_traces: int = Field(default=100_000, gt=0)
    otlp_max_buffered_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    otlp_warm_start: bool = False  # start the OTLP receiver's scoring worker with the app (`toollens serve` does)

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError("TOOLLENS_DATABASE_URL must be a sqlite:/// or postgresql+psycopg:// URL")
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://"):]
        return url

    @field_validator("api_token")
    @classmethod
    def _token_not_blank(cls, token: str | None) -> str | None:
        if token is not None and len(token.strip()) < 8:
            raise ValueError("TOOLLENS_API_TOKEN must be at least 8 characters (or unset)")
        return token
