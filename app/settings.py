"""Settings read from the environment (``TOOLLENS_*``), never at import time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.errors import ToolLensError


class SettingsError(ToolLensError):
    """A setting (an option or a ``TOOLLENS_*`` variable) that cannot be used; one line that names it."""


class Settings(BaseSettings):
    """``TOOLLENS_DATABASE_URL``, ``TOOLLENS_API_TOKEN``, ``TOOLLENS_MAX_BODY_BYTES``,
    ``TOOLLENS_OTLP_WARM_START``, ``TOOLLENS_ALLOWED_HOSTS``, ``TOOLLENS_MCP_MAX_BODY_BYTES``, the OTLP
    receiver's bounds ``TOOLLENS_OTLP_MAX_TRACE_SPANS``, ``TOOLLENS_OTLP_MAX_BUFFERED_SPANS``,
    ``TOOLLENS_OTLP_MAX_TRACES``, ``TOOLLENS_OTLP_MAX_BUFFERED_BYTES`` (docs/otlp-receiver.md), and what an
    import builds, ``TOOLLENS_IMPORT_MAX_*`` (docs/importers.md)."""

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
    # what an import builds from one archive member or log (app/importers/bounds.py, docs/importers.md)
    import_max_member_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    import_max_json_values: int = Field(default=10_000_000, gt=0)
    import_max_attachment_chars: int = Field(default=16 * 1024 * 1024, gt=0)
    import_max_attachment_chars_total: int = Field(default=256 * 1024 * 1024, gt=0)
    otlp_warm_start: bool = False  # start the OTLP receiver's scoring worker with the app (`toollens serve` does)

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, url: str) -> str:
        url = url.strip()
        if (url and ":" not in url.split("/")[0]) or url.startswith(("/", ".", "~")):  # a SQLite file's path
            return f"sqlite:///{Path(url).expanduser().resolve()}"
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError(f"must be a SQLite file's path, or a sqlite:/// or postgresql+psycopg:// URL, not {url!r}")
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://") :]
        return url

    @field_validator("api_token")
    @classmethod
    def _token_not_blank(cls, token: str | None) -> str | None:
        if token is not None and len(token.strip()) < 8:
            raise ValueError("must be at least 8 characters (or unset)")
        return token


OPTIONS = {"database_url": "--db"}  # the command-line option that sets a field, where one does


def load_settings(**given: Any) -> Settings:
    """Settings from the environment and the ``given`` values (options); a bad one is a
    SettingsError of one line naming the variable (and the option) and the value, never pydantic's dump."""
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise SettingsError("; ".join(_one_line(e, given) for e in exc.errors())) from None


def _one_line(error: Any, given: dict[str, Any]) -> str:
    field = str(error["loc"][0]) if error.get("loc") else ""
    name = f"TOOLLENS_{field.upper()}"
    if field in given and field in OPTIONS:
        name = f"{OPTIONS[field]} (or {name})"
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    shown = "" if field == "api_token" or "not '" in message else f" (got {str(error.get('input'))[:80]!r})"
    return f"{name}: {message}{shown}"
