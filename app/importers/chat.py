"""What the chat-log formats share: one conversation per JSON value (a line
of JSON Lines or an element of an array), read as a bare list of messages or
an envelope ``{"messages": [...], "tools": [...], "id", "trial", "reward"}``.

Conversion takes two passes over the source when the toolset must come from
the traces themselves (the tools a record declares, else the names it calls).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory, ToolSpecError
from app.core.records import MAX_NAME
from app.core.suites.tools import ToolSpec
from app.importers.base import Conversion, Converted, Options, record_or_reason
from app.importers.jsonstream import iter_json_values
from app.importers.toolsets import resolve_toolset, toolset_document

ToRecord = Callable[[list[Any]], dict[str, Any]]
"""Messages -> the trajectory-record fields it can fill (question, calls, answer)."""

MAX_MESSAGES = 100_000  # one conversation read as a top-level array of messages
ID_KEYS = ("case_id", "id", "conversation_id", "session_id", "trace_id")


class Envelope:
    """The parts of a conversation record around its messages."""

    __slots__ = ("case_id", "messages", "reward", "tools", "trial")

    def __init__(self, value: Any, line: int, source: str):
        if isinstance(value, list):
            self.messages: list[Any] = value
            self.case_id = f"line-{line}"
            self.trial: Any = 0
            self.reward: Any = None
            self.tools: Any = None
            return
        if not isinstance(value, Mapping):
            raise InvalidTrajectory(
                f"a conversation is a list of messages or an object with 'messages', got {type(value).__name__}",
                index=line,
                source=source,
            )
        messages = value.get("messages", value.get("traj"))
        if not isinstance(messages, list):
            raise InvalidTrajectory("required, a list of messages", index=line, field="messages", source=source)
        self.messages = messages
        found = next(
            (
                value[k]
                for k in ID_KEYS
                if isinstance(value.get(k), (str, int)) and not isinstance(value.get(k), bool) and str(value[k])
            ),
            None,
        )
        self.case_id = str(found)[:MAX_NAME] if found is not None else f"line-{line}"
        self.trial = value.get("trial", 0)
        self.reward = value.get("reward")
        self.tools = value.get("tools")


def _is_message(value: Any) -> bool:
    return isinstance(value, Mapping) and "role" in value and "messages" not in value


def conversations(path: Path) -> Iterator[tuple[int, Any]]:
    """The file's conversations: its JSON values, except that a top-level
    array whose elements are messages (they have a ``role``) is one
    conversation, not an array of conversations (a JSON Lines file of one
    bare message list reads this way)."""
    values = iter_json_values(path)
    first = next(values, None)
    if first is None:
        return
    line, value = first
    if not (_is_message(value) and _starts_with_bracket(path)):
        yield first
        yield from values
        return
    messages = [value]
    for at, more in values:
        if isinstance(more, InvalidTrajectory):
            yield at, more
            return
        if len(messages) >= MAX_MESSAGES:
            yield (
                line,
                InvalidTrajectory(f"a conversation of more than {MAX_MESSAGES} messages", index=line, source=str(path)),
            )
            return
        messages.append(more)
    yield line, messages


def _starts_with_bracket(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"["


def convert_chat(path: Path, options: Options, *, fmt: str, to_record: ToRecord) -> Conversion:
    """A conversion of a chat-log file whose conversations ``to_record`` reads."""
    source = str(path)
    notes: list[str] = []

    def convert_one(line: int, value: Any) -> Converted:
        if isinstance(value, InvalidTrajectory):
            return line, value

        def build() -> dict[str, Any]:
            env = Envelope(value, line, source)
            data = to_record(env.messages)
            data["case_id"] = env.case_id
            data["trial"] = env.trial
            if env.reward is not None:
                data["reward"] = env.reward
            return data

        return record_or_reason(line, build, source=source, what="conversation")

    def records() -> Iterator[Converted]:
        for line, value in conversations(path):
            yield convert_one(line, value)

    def scan() -> tuple[dict[str, Any], set[str]]:
        """One pass: the tools the records declare (the first definition of a
        name wins) and the names they call."""
        declared: dict[str, Any] = {}
        called: set[str] = set()
        for line, value in conversations(path):
            if isinstance(value, Mapping) and isinstance(value.get("tools"), list):
                for tool in value["tools"]:
                    try:
                        spec = ToolSpec.from_dict(tool)
                    except ToolSpecError:
                        continue
                    declared.setdefault(spec.name, spec.contract())
            _, traj = convert_one(line, value)
            if not isinstance(traj, InvalidTrajectory):
                called.update(c.name for c in traj.calls)
        return declared, called

    if options.tools is not None:
        toolset, more = resolve_toolset(options.tools, options.domain, lambda: scan()[1], name=path.stem)
    else:
        declared, called = scan()
        more = []
        if declared:
            toolset = toolset_document(list(declared.values()), name=path.stem)
            unknown = called - declared.keys()
            if unknown:
                notes.append(
                    f"{len(unknown)} called tool names are not among the declared tools "
                    "(they count as hallucinated tools)"
                )
        else:
            toolset, more = resolve_toolset(None, options.domain, lambda: called, name=path.stem)
    notes.extend(more)
    suite = {"name": path.stem, "toolset": toolset, "cases": []}
    return Conversion(suite=suite, records=records, notes=notes)
