"""Snapshot a live MCP server's tools (``tools/list``) into a Toolset, word
for word: the mock then carries the production contract."""

from __future__ import annotations

import shlex
import sys
import tempfile
from typing import Any, TextIO

import anyio

from app.core.errors import ToolLensError, ToolSpecError
from app.core.suites.tools import Toolset, ToolSpec

MAX_PAGES = 100


class SnapshotError(ToolLensError):
    """The server could not be reached or did not list its tools."""

    def __init__(self, exc: BaseException, stderr_tail: str = ""):
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        detail = str(leaf).strip().splitlines()
        message = f"cannot list tools: {type(leaf).__name__}: {detail[0] if detail else 'no detail'}"
        super().__init__(message + (f" (server stderr: {stderr_tail[:300]})" if stderr_tail else ""))


async def list_server_tools(
    *, command: str | None = None, url: str | None = None, timeout: float = 30.0, errlog: TextIO | None = None
) -> list[dict[str, Any]]:
    """Every tool the server lists (all pages), as ``{name, description,
    parameters}`` with the input schema exactly as served, plus ``title``,
    ``annotations`` and ``output_schema`` where the server gives them. A
    stdio server's standard error goes to ``errlog`` (a real file)."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    if (command is None) == (url is None):
        raise ValueError("give exactly one of command or url")
    server: Any
    if command is not None:
        argv = shlex.split(command)
        if not argv:
            raise ValueError("the command is empty")
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        server = stdio_client(params, errlog=errlog or sys.__stderr__ or sys.stderr)
    else:
        server = str(url)
    out: list[dict[str, Any]] = []
    with anyio.fail_after(timeout):
        async with Client(server, read_timeout_seconds=timeout) as client:
            cursor: str | None = None
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                out.extend(_contract(t) for t in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            if cursor is not None:  # never a silently truncated snapshot
                raise ToolSpecError(
                    f"the server lists more than {MAX_PAGES} pages of tools (tools/list still "
                    "returns a next cursor): snapshot refused rather than truncated"
                )
    return out


def _contract(tool: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema}
    if tool.title is not None:
        out["title"] = tool.title
    if tool.annotations is not None:
        out["annotations"] = tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
    if tool.output_schema is not None:
        out["output_schema"] = tool.output_schema
    return out


def snapshot_toolset(
    *, command: str | None = None, url: str | None = None, name: str = "", label: str = "", timeout: float = 30.0
) -> Toolset:
    """The server's tools as a Toolset (schemas kept verbatim, checked
    against the JSON Schema metaschema)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            contracts = anyio.run(lambda: list_server_tools(command=command, url=url, timeout=timeout, errlog=errlog))
        except Exception as exc:
            errlog.seek(0)
            tail = [line for line in errlog.read()[-4000:].splitlines() if line.strip()]
            raise SnapshotError(exc, tail[-1] if tail else "") from exc
    if not contracts:
        raise ToolSpecError("the server lists no tools")
    tools = [
        ToolSpec(
            name=c["name"],
            description=c["description"],
            parameters=dict(c["parameters"]),
            title=c.get("title"),
            annotations=c.get("annotations"),
            output_schema=c.get("output_schema"),
        )
        for c in contracts
    ]
    toolset = Toolset(tools=tools, name=name, label=label)
    for t in toolset:
        _ = t.validator  # a schema the validator cannot compile is reported now
    return toolset
