"""Snapshot a live MCP server's tools (``tools/list``) into a Toolset, word
for word: the mock then carries the production contract."""

from __future__ import annotations

import shlex
from typing import Any

import anyio

from app.core.errors import ToolSpecError
from app.core.tools import Toolset, ToolSpec

MAX_PAGES = 100


async def list_server_tools(*, command: str | None = None, url: str | None = None,
                            timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every tool the server lists (all pages), as ``{name, description,
    parameters}`` with the input schema exactly as served."""
    from mcp import Client, StdioServerParameters

    if (command is None) == (url is None):
        raise ValueError("give exactly one of command or url")
    server: StdioServerParameters | str
    if command is not None:
        argv = shlex.split(command)
        if not argv:
            raise ValueError("the command is empty")
        server = StdioServerParameters(command=argv[0], args=argv[1:])
    else:
        server = str(url)
    out: list[dict[str, Any]] = []
    with anyio.fail_after(timeout):
        async with Client(server, read_timeout_seconds=timeout) as client:
            cursor: str | None = None
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                out.extend({"name": t.name, "description": t.description or "", "parameters": t.input_schema}
                           for t in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
    return out


def snapshot_toolset(*, command: str | None = None, url: str | None = None, name: str = "", label: str = "",
                     timeout: float = 30.0) -> Toolset:
    """The server's tools as a Toolset (schemas kept verbatim, checked
    against the JSON Schema metaschema)."""
    contracts = anyio.run(lambda: list_server_tools(command=command, url=url, timeout=timeout))
    if not contracts:
        raise ToolSpecError("the server lists no tools")
    tools = [ToolSpec(name=c["name"], description=c["description"], parameters=dict(c["parameters"]))
             for c in contracts]
    toolset = Toolset(tools=tools, name=name, label=label)
    for t in toolset:
        _ = t.validator  # a schema the validator cannot compile is reported now
    return toolset
