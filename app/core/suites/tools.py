"""Tool specs: the production contract (name, description, schema) plus a mock.

The agent under test sees exactly what production declares; only the
execution is replaced. Specs are read from a Pydantic model, a JSON Schema,
OpenAI tool JSON, Anthropic tool JSON or BFCL's schema dialect, and exported
back in the OpenAI and Anthropic shapes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from app.core.errors import ToolSpecError
from app.core.suites.mocks import MockSpec, Responder, parse_mock
from app.core.suites.schema import ArgumentValidator

if TYPE_CHECKING:  # only annotates from_pydantic: scoring does not load pydantic
    from pydantic import BaseModel

# BFCL and some hand-written tools use Python-ish type names.
_DIALECT_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "list": "array",
    "int": "integer",
    "str": "string",
    "bool": "boolean",
    "double": "number",
    "long": "integer",
}


def normalize_schema(schema: Any) -> Any:
    """Return a JSON Schema with BFCL's dialect (``dict``, ``float``, ``tuple``,
    ``any``) rewritten to standard types. Standard schemas pass unchanged."""
    if isinstance(schema, list):
        return [normalize_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            names = value if isinstance(value, list) else [value]
            mapped = [_DIALECT_TYPES.get(n, n) if isinstance(n, str) else n for n in names]
            if "any" in mapped:
                continue  # "any": no type constraint at all
            out[key] = mapped if isinstance(value, list) else mapped[0]
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: normalize_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = normalize_schema(value)
        else:
            out[key] = value
    return out


@dataclass
class ToolSpec:
    """One tool as production declares it, plus how its execution is mocked."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    mock: MockSpec | None = None
    responder: Responder | None = None
    transparent: bool = False  # only thinks or computes, changes nothing: skipped when judging reactions
    # MCP's extras, kept beside the contract (not part of what the model reads, nor of the version hash)
    title: str | None = None
    annotations: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ToolSpecError("a tool needs a non-empty name")
        if not isinstance(self.description, str):
            raise ToolSpecError(f"tool {self.name!r}: description must be a string")
        if not isinstance(self.parameters, dict):
            raise ToolSpecError(f"tool {self.name!r}: parameters must be a JSON Schema object")

    @cached_property
    def validator(self) -> ArgumentValidator:
        try:
            return ArgumentValidator(self.parameters)
        except ToolSpecError as exc:
            raise ToolSpecError(f"tool {self.name!r}: {exc}") from exc

    def contract(self) -> dict[str, Any]:
        """The part the model reads: name, description, schema."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def document(self) -> dict[str, Any]:
        """The contract plus MCP's ``title``, ``annotations`` and ``output_schema``
        where the server gave them (what a snapshot stores)."""
        extras = {"title": self.title, "annotations": self.annotations, "output_schema": self.output_schema}
        return {**self.contract(), **{k: v for k, v in extras.items() if v is not None}}

    @property
    def destructive(self) -> bool:
        """MCP's hint: the tool may destroy or overwrite (``destructiveHint``,
        which the spec defaults to true for a tool that is not ``readOnlyHint``).
        False when the tool declares no annotations at all."""
        hints = self.annotations or {}
        if not hints or hints.get("readOnlyHint") is True:
            return False
        return hints.get("destructiveHint", True) is not False

    def to_openai(self) -> dict[str, Any]:
        return {"type": "function", "function": self.contract()}

    def to_anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}

    # -- constructors ------------------------------------------------------

    @classmethod
    def from_pydantic(cls, name: str, model: type[BaseModel], description: str | None = None, **kw: Any) -> ToolSpec:
        schema = model.model_json_schema()
        schema.pop("title", None)
        desc = description if description is not None else (model.__doc__ or "").strip()
        return cls(name=name, description=desc, parameters=schema, **kw)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolSpec:
        """Read any supported shape: ToolLens/BFCL (``parameters``), OpenAI
        (``{"type": "function", "function": ...}``), Anthropic (``input_schema``)
        or MCP's ``tools/list`` (``inputSchema``, with ``title``, ``annotations``
        and ``outputSchema`` kept beside)."""
        if not isinstance(data, Mapping):
            raise ToolSpecError(f"a tool must be an object, got {type(data).__name__}")
        mock_raw = data.get("mock")
        body: Mapping[str, Any] = data
        if data.get("type") == "function" and isinstance(data.get("function"), Mapping):
            body = data["function"]
        if "name" not in body:
            raise ToolSpecError("a tool needs a 'name'")
        if "input_schema" in body:
            params = body["input_schema"]
        elif "inputSchema" in body:
            params = body["inputSchema"]
        else:
            params = body.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, Mapping):
            raise ToolSpecError(f"tool {body['name']!r}: parameters must be an object")
        mock = parse_mock(mock_raw, where=f"tool {body['name']!r}") if mock_raw is not None else None
        transparent = data.get("transparent", False)
        if not isinstance(transparent, bool):
            raise ToolSpecError(f"tool {body['name']!r}: transparent must be true or false")
        title = body.get("title")
        annotations = body.get("annotations")
        output = body.get("output_schema", body.get("outputSchema"))
        return cls(
            name=str(body["name"]),
            description=str(body.get("description") or ""),
            parameters=normalize_schema(dict(params)),
            mock=mock,
            transparent=transparent,
            title=title if isinstance(title, str) else None,
            annotations=dict(annotations) if isinstance(annotations, Mapping) else None,
            output_schema=dict(output) if isinstance(output, Mapping) else None,
        )


@dataclass
class Toolset:
    """The tools an agent is given, plus toolset-wide dependency pairs and the
    hand-off tools (those that pass the conversation to a person)."""

    tools: list[ToolSpec]
    dependencies: list[tuple[str, str]] = field(default_factory=list)
    label: str = ""
    name: str = ""
    handoff: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for t in self.tools:
            if t.name in seen:
                raise ToolSpecError(f"tool {t.name!r} is declared twice")
            seen.add(t.name)
        self.by_name: dict[str, ToolSpec] = {t.name: t for t in self.tools}
        # ``think`` only thinks: transparent by default when the toolset has it
        self.transparent: frozenset[str] = frozenset(t.name for t in self.tools if t.transparent or t.name == "think")

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __iter__(self) -> Any:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def get(self, name: str) -> ToolSpec | None:
        return self.by_name.get(name)

    @property
    def version(self) -> str:
        """Content hash of the contracts: same names, descriptions and schemas,
        same version, whatever the mocks or the label."""
        return toolset_hash(t.contract() for t in self.tools)

    def openai_tools(self) -> list[dict[str, Any]]:
        return [t.to_openai() for t in self.tools]

    def anthropic_tools(self) -> list[dict[str, Any]]:
        return [t.to_anthropic() for t in self.tools]

    @classmethod
    def from_list(cls, items: Iterable[Mapping[str, Any]], **kw: Any) -> Toolset:
        return cls(tools=[ToolSpec.from_dict(item) for item in items], **kw)


def toolset_hash(contracts: Iterable[Mapping[str, Any]]) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of the contracts,
    sorted by tool name."""
    ordered = sorted(
        ({"name": c["name"], "description": c["description"], "parameters": c["parameters"]} for c in contracts),
        key=lambda c: c["name"],
    )
    blob = json.dumps(ordered, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
