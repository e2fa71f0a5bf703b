"""Request bodies of the API (the read models live in ``app.store.views``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RunCreate(BaseModel):
    """A new run. The suite is given inline (a self-contained document, the
    toolset inline) or by the id of a stored suite."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"oneOf": [{"required": ["suite"]}, {"required": ["suite_id"]}]},
    )

    name: str = Field(min_length=1, max_length=200)
    agent: str = Field(default="", max_length=200)
    model: str = Field(default="", max_length=200)
    suite: dict[str, Any] | None = None
    suite_id: int | None = Field(default=None, ge=1, le=2**31 - 1)
    config: dict[str, Any] = Field(default_factory=dict)


class TrajectoryBatch(BaseModel):
    """Trajectory records (docs/formats.md); each is validated by the core, and a bad
    one is reported with its index and field."""

    model_config = ConfigDict(extra="forbid")

    trajectories: list[dict[str, Any]] = Field(max_length=10_000)


class ErrorItem(BaseModel):
    index: int | None = None
    field: str | None = None
    message: str


class ErrorBody(BaseModel):
    """Every 4xx and 5xx answer: what went wrong, and where."""

    error: str
    detail: list[ErrorItem] = Field(default_factory=list)
