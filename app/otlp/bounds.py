"""The bounds a request's JSON is held to before it is decoded, and the refusal that names
one: used by the OTLP intake (``app.otlp.intake``) and by the web layer's JSON routes."""

from __future__ import annotations

MAX_JSON_VALUES = 2_000_000  # structural characters ({ [ ,) in one JSON body: a bound on the values it builds
MAX_SPANS = 50_000  # spans in one OTLP export request (an SDK exports 512 at a time)


class Refused(Exception):
    """A request refused at intake: its status and what to tell the client."""

    def __init__(self, status: int, error: str):
        super().__init__(error)
        self.status, self.error = status, error


def check_json_size(body: bytes, what: str = "the JSON body") -> None:
    """413 before decoding when the body could build more than MAX_JSON_VALUES values
    (counted a megabyte at a time, so that other threads run meanwhile)."""
    values = 0
    for start in range(0, len(body), 1 << 20):
        end = start + (1 << 20)
        values += body.count(b"{", start, end) + body.count(b"[", start, end) + body.count(b",", start, end)
        if values > MAX_JSON_VALUES:
            raise Refused(413, f"{what} holds more than {MAX_JSON_VALUES} JSON values (the limit per body)")
