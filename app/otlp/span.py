"""One OTLP span as a trajectory needs it: what the decoders (``app.otlp.spans``, the fast
protobuf reader ``app.otlp.wire``) build and ``app.importers.otel`` turns into records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUS_ERROR = 2


@dataclass(slots=True)
class Span:
    """The parts of an OTLP span a trajectory needs."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int
    end: int
    attributes: dict[str, Any]
    status_code: int = 0
    status_message: str = ""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def is_root(self) -> bool:
        return not self.parent_id
