"""Serve a case's mocked tools as an MCP server, recording every call.

The agent under test sees the suite's tools word for word (name,
description, input schema); the execution is the case's mocks behind the
MockRouter, with the fault plan. Each MCP session is one trajectory:

- stdio: the connection (one client per process);
- streamable HTTP: the ``Mcp-Session-Id`` of a legacy-era session, else the
  ``X-ToolLens-Trajectory`` header a harness may send, else one trajectory
  for the server's lifetime (clients of the stateless 2026-07-28 era send no
  session id). ``POST /toollens/end`` (``{"trajectory": key?, "answer": str?}``)
  ends a trajectory and may give the agent's final answer, which an MCP
  server never sees otherwise.

Every call is saved as the trajectory's record so far (``app.store.live``);
the trajectory is scored and stored when its session ends, at shutdown, or
on the next start with the same run.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ToolLensError
from app.core.records import MAX_CALLS, Fault, Trajectory
from app.core.router import FaultPlan, MockRouter
from app.core.scoring import Scorer
from app.core.suite import Case, Suite
from app.store import live
from app.store.db import session_scope

STDIO_KEY = "stdio"
HTTP_KEY = "http"
TRAJECTORY_HEADER = "x-toollens-trajectory"
MAX_KEY = 100
MAX_ANSWER = 100_000


class CallLimit(ToolLensError):
    """A session asked for more calls than one trajectory may hold."""


@dataclass
class _Open:
    router: MockRouter
    trial: int


def _owner_gone(key: str) -> bool:
    """A pending key whose server process (on this host) no longer runs."""
    _, _, owner = key.rpartition("@")
    host, _, pid = owner.rpartition(":")
    if not pid.isdigit():
        return True  # no owner recorded
    if host != socket.gethostname():
        return False  # cannot tell: left for its own server
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class CaseRecorder:
    """One case's routers, one per open trajectory, saved after every call.

    Pending keys carry their server (``<session>@<host>:<pid>``): several
    servers may record into one run (parallel trials), each storing only its
    own trajectories, and a restart stores only what a dead server left."""

    def __init__(self, sessions: sessionmaker[Session], run_id: int, suite: Suite, case: Case,
                 faults: FaultPlan | None):
        self.sessions = sessions
        self.run_id = run_id
        self.suite = suite
        self.case = case
        self.faults = faults
        self.scorer = Scorer(suite)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self.flush_errors: list[str] = []  # of the last flush: trajectories that could not be stored

    def _key(self, local: str) -> str:
        return f"{local}@{self.owner}"

    def _record(self, opened: _Open) -> dict[str, Any]:
        router = opened.router
        fault = router.first_fault
        if fault is None and self.faults is not None and self.faults.by_index:
            step = min(self.faults.by_index)  # planned but not reached: still say what was planned
            fault = Fault(step=step, kind=self.faults.by_index[step])
        return Trajectory(case_id=self.case.id, trial=opened.trial, question=self.case.question,
                          calls=list(router.log), answer="", fault=fault, state=dict(router.state)).to_dict()

    def call(self, key: str, name: str, arguments: Any) -> tuple[str, bool]:
        """Run one call through the trajectory's router and save the record so
        far before answering. Returns (observation, is_error)."""
        key = self._key(key)
        with self._lock:
            opened = self._open.get(key)
            if opened is not None and len(opened.router.log) >= MAX_CALLS:
                raise CallLimit(f"this session made {MAX_CALLS} calls, the most one trajectory holds: "
                                "end it (a new session starts a new trajectory)")
            with session_scope(self.sessions, write=True) as s:
                if opened is None:
                    opened = _Open(MockRouter(self.suite.toolset, self.faults, mocks=self.case.mocks),
                                   live.next_trial(s, self.run_id, self.case.id))
                observation = opened.router.call(name, arguments)
                live.save_pending(s, self.run_id, key, self._record(opened))
            self._open[key] = opened  # only once saved: a failed save leaves no half-open trajectory
            return observation, opened.router.log[-1].error is not None

    def end(self, key: str, answer: str | None = None) -> int:
        """Store the trajectory of ``key`` (with the agent's answer, if known)."""
        key = self._key(key)
        with self._lock:
            with session_scope(self.sessions, write=True) as s:
                stored = live.flush_pending(s, self.run_id, self.scorer, [key],
                                            None if answer is None else {key: answer[:MAX_ANSWER]})
            self._open.pop(key, None)
            return stored

    def end_all(self) -> int:
        """Store this server's pending trajectories (at shutdown)."""
        return self._flush(lambda k: k.endswith(f"@{self.owner}"))

    def recover(self) -> int:
        """Store the pending trajectories a dead server left (at start)."""
        return self._flush(lambda k: not k.endswith(f"@{self.owner}") and _owner_gone(k))

    def others_pending(self) -> bool:
        """Whether another server still has trajectories open in this run."""
        with session_scope(self.sessions) as s:
            return any(not k.endswith(f"@{self.owner}") for k in live.pending(s, self.run_id))

    def _flush(self, chosen: Callable[[str], bool]) -> int:
        """Store the chosen pending trajectories, each in its own transaction:
        one that cannot be stored stays pending, is named in ``flush_errors``,
        and does not stop the others."""
        with self._lock:
            with session_scope(self.sessions) as s:
                keys = [k for k in live.pending(s, self.run_id) if chosen(k)]
            stored = 0
            self.flush_errors = []
            for k in keys:
                try:
                    with session_scope(self.sessions, write=True) as s:
                        stored += live.flush_pending(s, self.run_id, self.scorer, [k])
                except ToolLensError as exc:
                    self.flush_errors.append(f"{k}: {exc}")
                    continue
                self._open.pop(k, None)
            return stored


def build_server(recorder: CaseRecorder, key_of: Callable[[Any], str]) -> Any:
    """The MCP server (lowlevel API): the suite's tools as listed in
    production, every call answered by the recorder."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

    tools = [types.Tool(name=t.name, description=t.description, input_schema=t.parameters)
             for t in recorder.suite.toolset]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        from mcp.shared.exceptions import MCPError

        key = key_of(ctx)
        try:
            observation, is_error = await anyio.to_thread.run_sync(recorder.call, key, params.name,
                                                                   dict(params.arguments or {}))
        except CallLimit as exc:
            raise MCPError(types.INVALID_REQUEST, str(exc)) from None
        return types.CallToolResult(content=[types.TextContent(text=observation)], is_error=is_error)

    return Server("toollens-mock", version="1", instructions=None, on_list_tools=list_tools,
                  on_call_tool=call_tool)


async def serve_stdio(recorder: CaseRecorder) -> None:
    """One client over stdin/stdout; its trajectory is stored when it disconnects."""
    from mcp.server.stdio import stdio_server

    server = build_server(recorder, lambda ctx: STDIO_KEY)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(recorder.end, STDIO_KEY)


def http_key(ctx: Any) -> str:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None) or {}
    for name in ("mcp-session-id", TRAJECTORY_HEADER):
        value = headers.get(name)
        if value:
            return f"{name[:3]}:{value[:MAX_KEY]}"
    return HTTP_KEY


class _EndOnDelete:
    """ASGI wrapper: a DELETE that terminates a legacy session also ends its trajectory."""

    def __init__(self, app: Any, recorder: CaseRecorder, path: str):
        self.app, self.recorder, self.path = app, recorder, path

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") == "http" and scope.get("method") == "DELETE" and scope.get("path") == self.path:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            sid = headers.get("mcp-session-id")
            if sid:  # stored before the client hears the session is over
                await anyio.to_thread.run_sync(self.recorder.end, f"mcp:{sid[:MAX_KEY]}")
        await self.app(scope, receive, send)


def http_app(recorder: CaseRecorder, *, host: str = "127.0.0.1", path: str = "/mcp") -> Any:
    """A Starlette app: the MCP endpoint at ``path`` and ``POST /toollens/end``."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def end(request: Request) -> JSONResponse:
        try:
            body = await request.json() if int(request.headers.get("content-length") or 0) else {}
        except ValueError:
            return JSONResponse({"error": "body must be JSON"}, status_code=422)
        if not isinstance(body, dict):
            return JSONResponse({"error": "body must be a JSON object"}, status_code=422)
        key, answer = body.get("trajectory"), body.get("answer")
        if (key is not None and not isinstance(key, str)) or (answer is not None and not isinstance(answer, str)):
            return JSONResponse({"error": "trajectory and answer are strings"}, status_code=422)
        full = HTTP_KEY if key is None else f"{TRAJECTORY_HEADER[:3]}:{key[:MAX_KEY]}"
        stored = await anyio.to_thread.run_sync(recorder.end, full, answer)
        return JSONResponse({"stored": stored})

    server = build_server(recorder, http_key)
    app = server.streamable_http_app(streamable_http_path=path, host=host,
                                     custom_starlette_routes=[Route("/toollens/end", end, methods=["POST"])])
    return _EndOnDelete(app, recorder, path)
