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
  server never sees otherwise. ``POST /toollens/message`` (``{"trajectory":
  key?, "role", "content"}``) adds what the user said: a conversation's turn
  boundary, which MCP does not carry either.

Every call is saved as the trajectory's record so far (``app.store.live``);
the trajectory is scored and stored when its session ends, at shutdown, or
on the next start with the same run.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ToolLensError
from app.core.keys import whole_key
from app.core.records import MAX_CALLS, MAX_MESSAGES, MESSAGE_ROLES, Message, Trajectory
from app.core.run.router import FaultPlan, MockRouter
from app.core.score.scoring import Scorer
from app.core.suites.suite import Case, Suite
from app.store import live
from app.store.db import session_scope

STDIO_KEY = "stdio"
HTTP_KEY = "http"
CONNECTION_PREFIX = "con:"
TRAJECTORY_HEADER = "x-toollens-trajectory"
SIDE = "/toollens/"  # the harness's side endpoints: /toollens/end, /toollens/message
MAX_KEY = 100  # characters of a session key; a longer one keeps its start and a hash of the whole (``whole_key``)
MAX_ANSWER = 100_000


class CallLimit(ToolLensError):
    """A session asked for more calls than one trajectory may hold."""


@dataclass
class _Open:
    router: MockRouter
    trial: int
    used: int = 0  # when the session last listed or called (a counter, for "the latest")
    said: int = 0  # messages a harness reported (stored as rows of their own: ``live.append_messages``)
    users: int = 0  # of them, the user's


class NoSession(ToolLensError):
    """A message names no trajectory, and no session without an id is open."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """When the process started (clock ticks since boot, Linux), "" where unknown."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rpartition(")")[2].split()[19] if ")" in stat else ""


def server_identity() -> dict[str, Any]:
    """What tells, later, whether this process still runs: a PID alone does
    not (a restarted container's server is PID 1 again), with the process's
    start time and the boot it is in it does."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "boot": _read("/proc/sys/kernel/random/boot_id"),
        "start": _start_time(os.getpid()),
    }


def server_gone(identity: Any) -> bool:
    """Whether a registered server's process no longer runs (False where this
    host cannot tell: another host name)."""
    if not isinstance(identity, dict) or not isinstance(identity.get("pid"), int):
        return True
    if identity.get("host") != socket.gethostname():
        return False
    if identity.get("boot") and identity.get("boot") != _read("/proc/sys/kernel/random/boot_id"):
        return True  # the machine restarted since
    try:
        os.kill(identity["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    start = identity.get("start")
    return bool(start) and _start_time(identity["pid"]) not in ("", start)  # that PID is another process now


def _any_running(servers: dict[str, Any], me: str) -> bool:
    return any(sid != me and not server_gone(ident) for sid, ident in servers.items())


class CaseRecorder:
    """One case's routers, one per open trajectory, saved after every call.

    Pending keys carry their server's random id (``<session>@<server id>``):
    several servers may record into one run (parallel trials), each storing
    only its own trajectories, and a start stores only what a dead server
    left (never host or PID as the key: a restarted server may have both)."""

    def __init__(
        self, sessions: sessionmaker[Session], run_id: int, suite: Suite, case: Case, faults: FaultPlan | None
    ):
        self.sessions = sessions
        self.run_id = run_id
        self.suite = suite
        self.case = case
        self.faults = faults
        self.scorer = Scorer(suite)
        self.owner = secrets.token_hex(8)
        self._open: dict[str, _Open] = {}
        self._clock = 0
        self._lock = threading.Lock()
        self.flush_errors: list[str] = []  # of the last flush: trajectories that could not be stored

    def _key(self, local: str) -> str:
        return f"{local}@{self.owner}"

    def register(self) -> None:
        """Note this server in the run: while it runs, no other server finishes the run."""
        with session_scope(self.sessions, write=True) as s:
            live.register_server(s, self.run_id, self.owner, server_identity())

    def _record(self, opened: _Open) -> dict[str, Any]:
        router = opened.router
        fault = router.first_fault
        if fault is None and self.faults is not None:
            fault = self.faults.planned()  # planned but not reached: still say what was planned
        return Trajectory(
            case_id=self.case.id,
            trial=opened.trial,
            question=self.case.question,
            calls=list(router.log),
            answer="",
            fault=fault,
            state=dict(router.state),
        ).to_dict()

    def _opened(self, s: Session, key: str) -> _Open:
        opened = self._open.get(key)
        if opened is None:
            opened = _Open(
                MockRouter(self.suite.toolset, self.faults, mocks=self.case.mocks),
                live.next_trial(s, self.run_id, self.case.id),
            )
        self._clock += 1
        opened.used = self._clock
        return opened

    def open(self, key: str) -> None:
        """Start the session's trajectory (at its first tools/list): a session
        that never calls a tool is still a trajectory, with no calls."""
        key = self._key(key)
        with self._lock:
            if key in self._open:
                return
            with session_scope(self.sessions, write=True) as s:
                opened = self._opened(s, key)
                live.save_pending(s, self.run_id, key, self._record(opened))
            self._open[key] = opened

    def call(self, key: str, name: str, arguments: Any) -> tuple[str, bool]:
        """Run one call through the trajectory's router and save the record so
        far before answering. Returns (observation, is_error)."""
        key = self._key(key)
        with self._lock:
            opened = self._open.get(key)
            if opened is not None and len(opened.router.log) >= MAX_CALLS:
                raise CallLimit(
                    f"this session made {MAX_CALLS} calls, the most one trajectory holds: "
                    "end it (a new session starts a new trajectory)"
                )
            with session_scope(self.sessions, write=True) as s:
                opened = self._opened(s, key)
                observation = opened.router.call(name, arguments)
                live.save_pending(s, self.run_id, key, self._record(opened))
            self._open[key] = opened  # only once saved: a failed save leaves no half-open trajectory
            return observation, opened.router.log[-1].error is not None

    def message(self, key: str | None, role: str, content: str) -> None:
        """Add what the user (or the agent) said to a session's trajectory. A
        user message after the first starts the next turn: the router counts
        a turn's calls (``turn:N,index:I`` faults) from there. The case's
        question is the first user message, put first when not sent."""
        with self._lock:
            if key is None:
                open_keys = [k for k in self._open if k.startswith((CONNECTION_PREFIX, HTTP_KEY))]
                if not open_keys:
                    raise NoSession("no session without an id is open: send the trajectory key")
                full = max(open_keys, key=lambda k: self._open[k].used)
            else:
                full = self._key(key)
            with session_scope(self.sessions, write=True) as s:
                fresh = full not in self._open
                opened = self._opened(s, full)
                if opened.said >= MAX_MESSAGES - 1:
                    raise CallLimit(f"this trajectory holds {MAX_MESSAGES} messages, the most a record may")
                at = len(opened.router.log)
                said: list[Message] = []
                if not opened.said and (role != "user" or content != self.case.question or at):
                    said.append(Message("user", self.case.question, 0))
                users = opened.users + len(said)
                if role == "user" and users:
                    opened.router.begin_turn(users + 1)
                said.append(Message(role, content[:MAX_ANSWER], at))
                if fresh:  # a session that starts with a message: its record, so that it is stored
                    live.save_pending(s, self.run_id, full, self._record(opened))
                live.append_messages(s, self.run_id, full, [m.to_dict() for m in said])  # one insert, no rewrite
            opened.said += len(said)
            opened.users += sum(1 for m in said if m.role == "user")
            self._open[full] = opened

    def end(self, key: str, answer: str | None = None, *, create: bool = False) -> int:
        """Store the trajectory of ``key`` (with the agent's answer, if known).
        ``create``: a session that never listed nor called is stored too, with
        no calls (an agent that answers without calling a tool)."""
        return self.end_many([key], answer, create=create)

    def end_many(self, keys: list[str], answer: str | None = None, *, create: bool = False) -> int:
        """Store these sessions' trajectories; the answer goes to the one used last."""
        full = [self._key(k) for k in keys]
        with self._lock:
            with session_scope(self.sessions, write=True) as s:
                if (
                    create
                    and len(full) == 1
                    and full[0] not in self._open
                    and not live.is_pending(s, self.run_id, full[0])
                ):
                    opened = self._opened(s, full[0])  # an answer without a call: the worst case, kept
                    live.save_pending(s, self.run_id, full[0], self._record(opened))
                    self._open[full[0]] = opened
                latest = max(full, key=lambda k: self._open[k].used if k in self._open else -1)
                stored = live.flush_pending(
                    s, self.run_id, self.scorer, full, None if answer is None else {latest: answer[:MAX_ANSWER]}
                )
            for k in full:
                self._open.pop(k, None)
            return stored

    def open_keys(self, prefix: str) -> list[str]:
        """This server's open sessions whose key starts with ``prefix`` (without the server id)."""
        with self._lock:
            return [k.rpartition("@")[0] for k in self._open if k.startswith(prefix)]

    def end_all(self) -> int:
        """Store this server's pending trajectories (at shutdown)."""
        return self._flush(lambda k: k.endswith(f"@{self.owner}"))

    def recover(self) -> int:
        """Store the pending trajectories of servers that no longer run (at start)."""
        with session_scope(self.sessions) as s:
            registered = live.servers(s, self.run_id)
        gone = {sid for sid, ident in registered.items() if sid != self.owner and server_gone(ident)}
        stored = self._flush(
            lambda k: (
                k.rpartition("@")[2] != self.owner
                and (k.rpartition("@")[2] in gone or k.rpartition("@")[2] not in registered)
            )
        )
        if gone and not self.flush_errors:
            with session_scope(self.sessions, write=True) as s:
                for sid in gone:
                    live.unregister_server(s, self.run_id, sid)
        return stored

    def stop(self, *, finish: bool) -> bool:
        """Take this server off the run; ``finish``: finish the run too if no
        other server still runs. Returns whether the run was finished."""
        with session_scope(self.sessions, write=True) as s:
            return live.unregister_server(
                s, self.run_id, self.owner, (lambda others: not _any_running(others, self.owner)) if finish else None
            )

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

    tools = [
        types.Tool(
            name=t.name,
            title=t.title,
            description=t.description,
            input_schema=t.parameters,
            output_schema=t.output_schema,
            annotations=None if t.annotations is None else types.ToolAnnotations.model_validate(t.annotations),
        )
        for t in recorder.suite.toolset
    ]
    with_output = {t.name for t in recorder.suite.toolset if t.output_schema is not None}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        await anyio.to_thread.run_sync(recorder.open, key_of(ctx))  # the agent saw the tools: a trajectory
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        from mcp.shared.exceptions import MCPError

        key = key_of(ctx)
        try:
            observation, is_error = await anyio.to_thread.run_sync(
                recorder.call, key, params.name, dict(params.arguments or {})
            )
        except CallLimit as exc:
            raise MCPError(types.INVALID_REQUEST, str(exc)) from None
        structured = _structured(observation) if params.name in with_output and not is_error else None
        return types.CallToolResult(
            content=[types.TextContent(text=observation)], is_error=is_error, structured_content=structured
        )

    return Server("toollens-mock", version="1", instructions=None, on_list_tools=list_tools, on_call_tool=call_tool)


def _structured(observation: str) -> dict[str, Any] | None:
    """A mocked answer that is a JSON object, as the structured content a
    tool with an output schema returns (clients check it against the schema)."""
    try:
        value = json.loads(observation)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


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
    """The session a request belongs to: its ``Mcp-Session-Id`` (legacy
    era), else the ``X-ToolLens-Trajectory`` header, else its TCP connection
    (a client that sends no session id keeps one connection per session)."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None) or {}
    for name in ("mcp-session-id", TRAJECTORY_HEADER):
        value = headers.get(name)
        if value:
            return f"{name[:3]}:{whole_key(value, MAX_KEY)}"
    client = getattr(request, "client", None)
    if client is not None:
        return f"{CONNECTION_PREFIX}{str(client.host)[:MAX_KEY]}:{client.port}"
    return HTTP_KEY


class _EndOnDelete:
    """ASGI wrapper: a DELETE that terminates a legacy session also ends its trajectory."""

    def __init__(self, app: Any, recorder: CaseRecorder, path: str):
        self.app, self.recorder, self.path = app, recorder, path

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope.get("type") == "http" and scope.get("method") == "DELETE" and scope.get("path") == self.path:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            sid = headers.get("mcp-session-id")
            if sid:  # stored before the client hears the session is over
                await anyio.to_thread.run_sync(self.recorder.end, f"mcp:{whole_key(sid, MAX_KEY)}")
        await self.app(scope, receive, send)


class _SideIntake:
    """ASGI: ``/toollens/*`` (the harness's side endpoints) through the API's intake (Host
    allow-list, token, JSON only, bounded bodies); ``/mcp`` as the MCP SDK answers it."""

    def __init__(self, app: Any, intake: Any):
        self.app, self.intake = app, intake

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        side = scope.get("type") == "http" and str(scope.get("path", "")).startswith(SIDE)
        await (self.intake if side else self.app)(scope, receive, send)


def _trajectory_key(key: str) -> str:
    """A harness's trajectory key (header or body) as a session key, compared whole."""
    return f"{TRAJECTORY_HEADER[:3]}:{whole_key(key, MAX_KEY)}"


def http_app(
    recorder: CaseRecorder,
    *,
    host: str = "127.0.0.1",
    path: str = "/mcp",
    token: str | None = None,
    allowed: str = "",
    max_bytes: int = 2 << 20,
) -> Any:
    """A Starlette app: the MCP endpoint at ``path``, ``POST /toollens/end`` and ``POST
    /toollens/message``. Those two take writes as the API does (docs/security.md): the
    bearer ``token`` when one is set, a Host of ``allowed`` (comma-separated; empty: the
    loopback names and ``host``), same-origin only, JSON bodies of at most ``max_bytes``."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from app.web.limits import Intake, Refused, allowed_hosts, read_json, same_origin

    async def body_of(request: Request) -> Any:
        """The JSON body (None when empty); Refused when it is not a same-origin one or not JSON."""
        if not same_origin(request):
            raise Refused(403, "another site's page cannot write here (same-origin requests only)")
        raw = await request.body()  # bounded by the intake
        return await anyio.to_thread.run_sync(read_json, raw) if raw else None

    async def end(request: Request) -> JSONResponse:
        try:
            body = await body_of(request)
        except Refused as exc:
            return JSONResponse({"error": exc.error}, status_code=422 if exc.status == 400 else exc.status)
        body = {} if body is None else body
        if not isinstance(body, dict):
            return JSONResponse({"error": "body must be a JSON object"}, status_code=422)
        key, answer = body.get("trajectory"), body.get("answer")
        if (key is not None and not isinstance(key, str)) or (answer is not None and not isinstance(answer, str)):
            return JSONResponse({"error": "trajectory and answer are strings"}, status_code=422)
        if key is not None:
            stored = await anyio.to_thread.run_sync(lambda: recorder.end(_trajectory_key(key), answer, create=True))
        else:  # the sessions that sent no id (one per connection); none: an answer with no call at all
            keys = recorder.open_keys(CONNECTION_PREFIX) + recorder.open_keys(HTTP_KEY)
            keys = keys or [f"{CONNECTION_PREFIX}end-{secrets.token_hex(4)}"]
            stored = await anyio.to_thread.run_sync(lambda: recorder.end_many(keys, answer, create=True))
        return JSONResponse({"stored": stored})

    async def message(request: Request) -> JSONResponse:
        try:
            body = await body_of(request)
        except Refused as exc:
            if exc.status != 400:
                return JSONResponse({"error": exc.error}, status_code=exc.status)
            body = None
        if (
            not isinstance(body, dict)
            or body.get("role") not in MESSAGE_ROLES
            or not isinstance(body.get("content"), str)
            or not isinstance(body.get("trajectory"), (str, type(None)))
        ):
            return JSONResponse(
                {"error": 'body: {"trajectory"?: key, "role": "user"|"assistant", "content": text}'}, status_code=422
            )
        key = body.get("trajectory")
        full = None if key is None else _trajectory_key(key)
        try:
            await anyio.to_thread.run_sync(recorder.message, full, body["role"], body["content"])
        except NoSession as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        except CallLimit as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        return JSONResponse({"recorded": True})

    server = build_server(recorder, http_key)
    app = server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        custom_starlette_routes=[
            Route(f"{SIDE}end", end, methods=["POST"]),
            Route(f"{SIDE}message", message, methods=["POST"]),
        ],
    )
    ended = _EndOnDelete(app, recorder, path)
    intake = Intake(
        ended,
        max_bytes=max_bytes,
        token=token,
        hosts=allowed_hosts(allowed, host),
        guarded=(SIDE,),
        setting="TOOLLENS_MCP_MAX_BODY_BYTES",
    )
    return _SideIntake(ended, intake)
