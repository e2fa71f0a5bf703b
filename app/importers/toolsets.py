"""The toolset of an imported source: a tool-schema file (``--tools``), or,
without one, a toolset inferred from the tool names the traces call.

A schema file is a list of tools (ToolLens, OpenAI or Anthropic shapes),
``{"tools": [...]}``, or several domains ``{"airline": [...], "retail":
[...]}``: the domain is the one given, else the one whose tools the traces
call most.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import SuiteError, ToolSpecError
from app.core.suites.suite import _read_document
from app.core.suites.tools import Toolset

OPEN_SCHEMA: dict[str, Any] = {"type": "object"}
INFERRED_LABEL = "inferred from the traces"


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, Mapping):
        fn = tool.get("function")
        body = fn if isinstance(fn, Mapping) else tool
        name = body.get("name")
        return name if isinstance(name, str) else None
    return None


def read_tools_file(path: Path) -> Any:
    return _read_document(path)


def domains_of(document: Any) -> dict[str, list[Any]] | None:
    """``{domain: tools}`` when the document holds several toolsets, else None."""
    if (
        isinstance(document, Mapping)
        and "tools" not in document
        and document
        and all(isinstance(v, list) for v in document.values())
    ):
        return {str(k): v for k, v in document.items()}
    return None


def pick_tools(path: Path, *, domain: str | None, called: Callable[[], Iterable[str]] = tuple) -> tuple[list[Any], str]:
    """The tool list of a schema file and the toolset's name (the domain, or
    the file's stem)."""
    document = read_tools_file(path)
    domains = domains_of(document)
    if domains is not None:
        if domain is not None:
            if domain not in domains:
                raise SuiteError(f"no domain {domain!r} (the file has {', '.join(sorted(domains))})", path=str(path))
            return domains[domain], domain
        if len(domains) == 1:
            return next(iter(domains.values())), next(iter(domains))
        names = set(called())
        scores = {d: sum(1 for t in tools if _tool_name(t) in names) for d, tools in domains.items()}
        best = max(sorted(scores), key=lambda d: scores[d])
        if scores[best] == 0:
            raise SuiteError(
                f"the traces call no tool of any domain ({', '.join(sorted(domains))}): give --domain", path=str(path)
            )
        return domains[best], best
    if domain is not None:
        raise SuiteError(f"--domain {domain!r} given, but the file holds a single toolset", path=str(path))
    if isinstance(document, Mapping) and isinstance(document.get("tools"), list):
        return document["tools"], str(document.get("name") or path.stem)
    if isinstance(document, list):
        return document, path.stem
    raise SuiteError('a tool-schema file is a list of tools, {"tools": [...]}, or {domain: [tools]}', path=str(path))


def check_tools(tools: list[Any], where: str) -> list[Any]:
    """Fail now, naming the file, if a tool cannot be read."""
    try:
        for t in Toolset.from_list(tools):
            _ = t.validator
    except ToolSpecError as exc:
        raise SuiteError(str(exc), path=where) from None
    return tools


def inferred_tools(names: Iterable[str]) -> list[dict[str, Any]]:
    """Tools known only by name: any arguments validate. Schema validity and
    hallucinated tools then say nothing; a note says so."""
    return [{"name": n, "description": "", "parameters": dict(OPEN_SCHEMA)} for n in sorted(set(names)) if n.strip()]


# Tools that pass the conversation to a person: ending on one after an error is
# an escalation, an honest give-up. Marked as hand-offs when a source's toolset has them.
KNOWN_HANDOFFS = (
    "transfer_to_human_agents",
    "transfer_to_human_agent",
    "transfer_to_human",
    "escalate_to_human",
    "handoff_to_human",
)


def toolset_document(tools: list[Any], *, name: str, label: str = "") -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "tools": tools}
    if label:
        doc["label"] = label
    names = {_tool_name(t) for t in tools}
    handoff = [h for h in KNOWN_HANDOFFS if h in names]
    if handoff:
        doc["handoff"] = handoff
    return doc


def resolve_toolset(
    tools_path: Path | None,
    domain: str | None,
    called_names: Callable[[], Iterable[str]],
    *,
    name: str,
    offered: Callable[[], list[Any]] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The toolset document for a suite, and notes for the person importing.
    ``called_names`` (a pass over the traces) runs only when it is needed;
    ``offered``, the tool schemas the traces themselves hold (OpenTelemetry
    model spans), is the toolset when no file is given."""
    if tools_path is not None:
        tools, tname = pick_tools(tools_path, domain=domain, called=called_names)
        return toolset_document(check_tools(tools, str(tools_path)), name=tname), []
    if domain is not None:
        raise SuiteError("--domain needs --tools (a schema file with several domains)")
    schemas_note = ""
    schemas = offered() if offered is not None else []
    if schemas:
        try:
            check_tools(schemas, "the traces' tool definitions")
        except SuiteError as exc:
            schemas_note = f"the traces' tool definitions are not usable ({exc}); "
        else:
            return toolset_document(schemas, name=name), [
                f"no --tools: toolset of the {len(schemas)} tool schemas the traces' model spans were offered"
            ]
    called = set(called_names())
    if not called:
        raise SuiteError("the traces call no tool and no --tools file was given: nothing to build a toolset from")
    notes = [
        f"{schemas_note}no --tools: toolset of {len(called)} tool names inferred from the traces; schema "
        "validity and hallucinated tools need the real schemas (--tools)"
    ]
    return toolset_document(inferred_tools(called), name=name, label=INFERRED_LABEL), notes


def add_expected_tools(toolset: dict[str, Any], expected: Iterable[str]) -> list[str]:
    """Tools the reference's expected calls name that the toolset lacks (a --tools file, or the
    source's own definitions, without them), added by name so that every expected call's tool
    is in the toolset; the note for the person importing."""
    have = {_tool_name(t) for t in toolset["tools"]}
    missing = sorted(set(expected) - have)
    if not missing:
        return []
    toolset["tools"] = [*toolset["tools"], *inferred_tools(missing)]
    shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
    return [
        f"{len(missing)} tools the tasks' actions name are not among the tool schemas: added by name, any "
        f"arguments validate ({shown})"
    ]
