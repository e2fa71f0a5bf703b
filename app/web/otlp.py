"""The OTLP/HTTP route: ``POST /v1/traces`` (protobuf or JSON) into a named run, and its
status. The request is decoded by ``app.otlp.intake`` and handed to the receiver
(``app.otlp``, which says what is guaranteed), then answered.

The run is ``?run=NAME`` or the ``X-ToolLens-Run`` header (default ``otlp``); it must exist
(``POST /api/runs`` with the suite whose toolset the agent uses). docs/otlp-receiver.md
says what is guaranteed.
"""

from __future__ import annotations

import logging
import threading
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.core.errors import ToolLensError
from app.otlp.bounds import Refused
from app.otlp.intake import decode_export
from app.otlp.receiver import OtlpReceiver, made
from app.otlp.spans import SpanRef
from app.store.db import read_only_error
from app.web.deps import require_token
from app.web.errors import error_response

log = logging.getLogger("toollens.otlp")

DEFAULT_RUN = "otlp"
PROTOBUF = "application/x-protobuf"


def receiver_for(request: Request) -> OtlpReceiver:
    """The app's receiver, made on first use."""
    state = request.app.state
    receiver: OtlpReceiver | None = getattr(state, "otlp", None)
    if receiver is None:
        with _MAKE_LOCK:
            receiver = getattr(state, "otlp", None)
            if receiver is None:
                receiver = state.otlp = made(state)
    return receiver


_MAKE_LOCK = threading.Lock()


# -- the route -----------------------------------------------------------------------

router = APIRouter()


# OTLP/HTTP is a protocol of its own (protobuf bodies), documented in the
# README rather than in the JSON API's OpenAPI schema.
@router.post("/v1/traces", include_in_schema=False)
async def receive_traces(
    request: Request,
    run: Annotated[str | None, Query(max_length=200, description="Run name (or the X-ToolLens-Run header).")] = None,
    x_toollens_run: Annotated[str | None, Header(max_length=200)] = None,
    group_by: Annotated[
        str | None,
        Query(
            max_length=200,
            description="One trajectory per value of this span or "
            "resource attribute (a conversation), not one per trace.",
        ),
    ] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> Response:
    """OTLP/HTTP trace export (protobuf or JSON) into a named run."""
    require_token(request, authorization)
    protobuf = request.headers.get("content-type", "").split(";")[0].strip().lower() == PROTOBUF
    receiver = receiver_for(request)
    with receiver.in_flight():  # traces wait for requests that began before their last span: they may hold more
        body = await request.body()  # bounded by the app's intake, as are its type and the token
        try:  # inflated, bounded and read in a worker thread: the event loop goes on answering
            form, body, spans = await run_in_threadpool(
                decode_export,
                body,
                request.headers.get("content-encoding", "").strip().lower(),
                protobuf,
                request.app.state.settings.max_body_bytes,
                group_by,
            )
        except Refused as exc:
            return error_response(exc.status, exc.error)
        try:
            await run_in_threadpool(_take_in, receiver, run or x_toollens_run or DEFAULT_RUN, form, body, spans)
        except Refused as exc:  # a bound of the buffer: nothing of the request was taken
            return error_response(exc.status, exc.error, headers={"Retry-After": "1"} if exc.status == 503 else None)
        except ToolLensError:
            raise
        except Exception as exc:  # the database is away: the exporter retries, nothing is lost
            if read_only_error(exc):  # said once at the start (``open_receiver``), not per request
                return error_response(503, "the database is read-only: this server stores no spans")
            log.exception("spans could not be staged")
            return error_response(503, "the spans could not be staged: retry later", headers={"Retry-After": "2"})
    if protobuf:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)
    return Response(b"{}", media_type="application/json")


def _take_in(receiver: OtlpReceiver, run_name: str, form: str, body: bytes, spans: list[SpanRef]) -> None:
    if not spans:
        receiver.run_id(run_name)  # a request with no spans still learns whether its run takes spans
        return
    receiver.take_in(run_name, form, body, spans)


@router.get("/v1/traces/status", include_in_schema=False)
def receiver_status(request: Request) -> dict[str, int | bool | None]:
    """What the receiver took, stored and still buffers (spans and traces), and
    whether its scoring worker is loaded (null: none running)."""
    receiver = receiver_for(request)
    stats = receiver.stats
    return {
        "accepted_spans": stats.accepted_spans,
        "stored_spans": stats.stored_spans,
        "buffered_spans": receiver.buffered_spans,
        "stored_traces": stats.stored_traces,
        "duplicate_spans": stats.duplicate_spans,
        "rejected_traces": stats.rejected_traces,
        "rejected_spans": stats.rejected_spans,
        "refused_requests": stats.refused_requests,
        "repaired_traces": stats.repaired_traces,
        "retried_traces": stats.retried_traces,
        "worker_traces": stats.worker_traces,
        "split_traces": stats.split_traces,
        "memory_given_back": stats.memory_given_back,
        "worker_ready": receiver.worker_ready,
    }
