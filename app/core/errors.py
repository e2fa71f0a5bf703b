"""Domain errors of the evaluation core.

They carry enough context (file, line, case id, field) to be shown to a
person as is; the CLI and the web layer map them to exit codes and HTTP
statuses at the edge.
"""

from __future__ import annotations


class ToolLensError(Exception):
    """Base class of every error the core raises on purpose."""


class SuiteError(ToolLensError):
    """A suite or toolset file is malformed.

    The message names the file, the case id (when the fault is inside a case)
    and the field at fault.
    """

    def __init__(self, message: str, *, path: str = "", case_id: str = "", field: str = ""):
        self.path = path
        self.case_id = case_id
        self.field = field
        where = [p for p in (path, f"case {case_id!r}" if case_id else "", field) if p]
        super().__init__(f"{': '.join(where)}: {message}" if where else message)
        self.detail = message


class InvalidTrajectory(ToolLensError):
    """A trajectory record does not follow docs/formats.md.

    `index` is the 1-based line of a JSONL file (or record index of a batch).
    """

    def __init__(self, message: str, *, index: int | None = None, field: str = "", source: str = ""):
        self.index = index
        self.field = field
        self.source = source
        where = []
        if source or index is not None:
            where.append(f"{source}:{index}" if source and index is not None else source or f"record {index}")
        if field:
            where.append(field)
        super().__init__(f"{': '.join(where)}: {message}" if where else message)
        self.detail = message


class ToolSpecError(ToolLensError):
    """A tool definition cannot be read (unknown shape, bad schema)."""


class InfrastructureError(ToolLensError):
    """What runs the agent failed, not the agent (a model endpoint that keeps
    answering 5xx, for instance): the case is not a failed case."""
