"""Request bodies of the API (the read models live in ``app.store.views``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.core.records import MAX_CALLS, MAX_INDEX, MAX_NAME, clean_text, clean_value

# What the core checks of a trajectory record (app.core.records.parse_record), said in JSON Schema;
# the core checks more (a case the run's suite has, lengths of names), answering 422 naming the field.
RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["case_id"],
    "properties": {
        "case_id": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": MAX_NAME}, {"type": "integer"}]},
        "trial": {"type": "integer", "minimum": 0, "maximum": MAX_INDEX},
        "calls": {
            "type": "array",
            "maxItems": MAX_CALLS,
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string", "maxLength": MAX_NAME}},
            },
        },
        "reward": {"type": ["number", "null"]},
        "state": {"type": ["object", "null"]},
    },
}


class RunCreate(BaseModel):
    """A new run. The suite is given inline (a self-contained document, the
    toolset inline) or by the id of a stored suite."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["suite"], "properties": {"suite": {"type": "object"}}},
                {"required": ["suite_id"], "properties": {"suite_id": {"type": "integer"}}},
            ]
        },
    )

    name: str = Field(min_length=1, max_length=200)
    agent: str = Field(default="", max_length=200)
    model: str = Field(default="", max_length=200)
    suite: dict[str, Any] | None = None
    suite_id: int | None = Field(default=None, ge=1, le=2**31 - 1)
    config: dict[str, Any] = Field(default_factory=dict)
    lenient: bool = False  # an inline suite's mistakes the loader can read are accepted (imported suites)

    @field_validator("name", "agent", "model")
    @classmethod
    def _stored_text(cls, text: str) -> str:
        return clean_text(text)

    @field_validator("suite", "config")
    @classmethod
    def _stored_json(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else clean_value(value)


class TrajectoryBatch(BaseModel):
    """Trajectory records (docs/formats.md); each is validated by the core, and a bad
    one is reported with its index and field."""

    model_config = ConfigDict(extra="forbid")

    trajectories: list[dict[str, Any]] = Field(max_length=10_000, json_schema_extra={"items": RECORD_SCHEMA})


class ErrorItem(BaseModel):
    index: int | None = None
    field: str | None = None
    message: str


class ErrorBody(BaseModel):
    """Every 4xx and 5xx answer: what went wrong, and where."""

    error: str
    detail: list[ErrorItem] = Field(default_factory=list)


class CallEditBody(BaseModel):
    """A change to one step of the curated case, by the index of the trajectory
    call it comes from: drop it, a rule per argument (``"exact"`` removes one),
    other values (``null`` removes the field)."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0, le=MAX_CALLS)
    keep: bool = True
    tolerance: dict[str, Any] = Field(default_factory=dict, max_length=1_000)
    arguments: dict[str, Any] = Field(default_factory=dict, max_length=1_000)

    @field_validator("tolerance", "arguments")
    @classmethod
    def _stored_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        return clean_value(value)  # type: ignore[no-any-return]


class CaseCreate(BaseModel):
    """A stored trajectory to add as a case, with the edits that make it the reference."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: int = Field(ge=1, le=2**31 - 1)
    case_id: str = Field(min_length=1, max_length=MAX_NAME)
    calls: list[CallEditBody] = Field(default_factory=list, max_length=MAX_CALLS)
    expected_datum: str | list[str] | None = None
    expected_state: dict[str, Any] | None = None
    new_suite: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("case_id", "new_suite")
    @classmethod
    def _stored_text(cls, text: str | None) -> str | None:
        return None if text is None else clean_text(text)

    @field_validator("expected_state")
    @classmethod
    def _state(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else clean_value(value)
