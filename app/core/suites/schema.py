"""Strict JSON Schema validation of tool arguments, compiled once per tool.

A tool call is judged against the tool's real schema in strict mode: no type
coercion (``"8812"`` is not an integer, ``5.0`` is not an integer, ``True`` is
not a number), declared formats are checked, and extras are refused where the
schema forbids them. The message of the first failing field is what the mock
returns to the agent, so it names the field and says what was expected.

The common subset of JSON Schema that tool definitions use is compiled into
closures (fast: scoring validates every recorded call). A schema using a
keyword outside that subset falls back to the ``jsonschema`` library with the
same strict type rules.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.errors import ToolSpecError
from app.core.suites.metacheck import plainly_valid


@dataclass(frozen=True, slots=True)
class SchemaViolation:
    """The first failing field of a call: dotted path and readable message."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message


Check = Callable[[Any, str], SchemaViolation | None]

_MAX_DEPTH = 64

_TYPE_NAMES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else _compact(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _label(path: str) -> str:
    return f"field '{path}'" if path else "arguments"


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return type(value) is int
    if name == "number":
        return type(value) in (int, float) and not (type(value) is float and (math.isnan(value) or math.isinf(value)))
    if name == "string":
        return type(value) is str
    if name == "boolean":
        return type(value) is bool
    if name == "object":
        return type(value) is dict
    if name == "array":
        return type(value) is list
    if name == "null":
        return value is None
    return True


def _check_date(text: str) -> bool:
    if not _ISO_DATE.fullmatch(text):
        return False
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _check_datetime(text: str) -> bool:
    if not _ISO_DATETIME.fullmatch(text):
        return False
    try:
        dt.datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _check_time(text: str) -> bool:
    return _ISO_TIME.fullmatch(text) is not None


_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?")
_ISO_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?")

_FORMATS: dict[str, tuple[Callable[[str], bool], str]] = {
    "date": (_check_date, "a date YYYY-MM-DD"),
    "date-time": (_check_datetime, "a date-time YYYY-MM-DDTHH:MM:SS"),
    "time": (_check_time, "a time HH:MM[:SS]"),
    "email": (lambda s: _EMAIL.fullmatch(s) is not None, "an e-mail address"),
    "uuid": (lambda s: _UUID.fullmatch(s) is not None, "a UUID"),
}

# Keywords the compiler understands; annotations are ignored on purpose.
_ANNOTATIONS = {
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$schema",
    "$id",
    "$comment",
    "readOnly",
    "writeOnly",
    "deprecated",
    "discriminator",
    "nullable",
    "optional",
}
_SUPPORTED = _ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "pattern",
    "format",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "minProperties",
    "maxProperties",
    "prefixItems",
}


class _Compiler:
    def __init__(self, root: dict[str, Any]):
        self.root = root
        self.refs: dict[str, Check] = {}

    def resolve(self, ref: str) -> dict[str, Any]:
        if ref == "#":
            return self.root
        if not ref.startswith("#/"):
            raise ToolSpecError(f"only local $ref is supported, got {ref!r}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise ToolSpecError(f"$ref {ref!r} does not resolve")
            node = node[part]
        if not isinstance(node, dict):
            raise ToolSpecError(f"$ref {ref!r} is not a schema")
        return node

    def compile(self, schema: Any, depth: int = 0) -> Check:
        if depth > _MAX_DEPTH:
            raise ToolSpecError("schema nests too deeply")
        if schema is True or schema == {}:
            return _accept
        if schema is False:
            return lambda v, p: SchemaViolation(p, f"{_label(p)}: no value is allowed here")
        if not isinstance(schema, dict):
            raise ToolSpecError(f"a schema must be an object, got {_json_type(schema)}")
        checks: list[Check] = []
        if "$ref" in schema:
            ref = schema["$ref"]
            if ref not in self.refs:
                self.refs[ref] = _accept  # placeholder breaks recursion
                target = self.compile(self.resolve(ref), depth + 1)
                self.refs[ref] = target
            cache = self.refs

            def check_ref(v: Any, p: str, ref: str = ref) -> SchemaViolation | None:
                return cache[ref](v, p)

            checks.append(check_ref)
        types = schema.get("type")
        if types is not None:
            checks.append(_type_check([types] if isinstance(types, str) else list(types)))
        if "enum" in schema:
            checks.append(_enum_check(list(schema["enum"])))
        if "const" in schema:
            checks.append(_enum_check([schema["const"]]))
        checks.extend(self._string_checks(schema))
        checks.extend(_number_checks(schema))
        checks.extend(self._array_checks(schema, depth))
        checks.extend(self._object_checks(schema, depth))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                checks.append(self._any_of([self.compile(s, depth + 1) for s in schema[key]], key))
        if "allOf" in schema:
            checks.extend(self.compile(s, depth + 1) for s in schema["allOf"])
        if not checks:
            return _accept
        if len(checks) == 1:
            return checks[0]
        plain = _PLAIN.get(types) if isinstance(types, str) and "$ref" not in schema else None
        if plain is not None:
            # the type first, inline; the other keywords only see a value of that type
            type_error = checks[0]
            rest = checks[1:]

            def check_typed(v: Any, p: str) -> SchemaViolation | None:
                if type(v) not in plain:
                    return type_error(v, p)
                for c in rest:
                    err = c(v, p)
                    if err is not None:
                        return err
                return None

            return check_typed

        def check_all(v: Any, p: str) -> SchemaViolation | None:
            for c in checks:
                err = c(v, p)
                if err is not None:
                    return err
            return None

        return check_all

    def _string_checks(self, schema: dict[str, Any]) -> list[Check]:
        out: list[Check] = []
        fmt = schema.get("format")
        if fmt in _FORMATS:
            test, what = _FORMATS[fmt]

            def check_format(v: Any, p: str) -> SchemaViolation | None:
                if type(v) is str and not test(v):
                    return SchemaViolation(p, f"{_label(p)}: expected {what}, got {_show(v)}")
                return None

            out.append(check_format)
        if "pattern" in schema:
            rx = re.compile(schema["pattern"])
            pattern = schema["pattern"]

            def check_pattern(v: Any, p: str) -> SchemaViolation | None:
                if type(v) is str and rx.search(v) is None:
                    return SchemaViolation(p, f"{_label(p)}: {_show(v)} does not match pattern '{pattern}'")
                return None

            out.append(check_pattern)
        lo, hi = schema.get("minLength"), schema.get("maxLength")
        if lo is not None or hi is not None:

            def check_len(v: Any, p: str) -> SchemaViolation | None:
                if type(v) is str:
                    if lo is not None and len(v) < lo:
                        return SchemaViolation(p, f"{_label(p)}: shorter than {lo} characters")
                    if hi is not None and len(v) > hi:
                        return SchemaViolation(p, f"{_label(p)}: longer than {hi} characters")
                return None

            out.append(check_len)
        return out

    def _array_checks(self, schema: dict[str, Any], depth: int) -> list[Check]:
        out: list[Check] = []
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        if isinstance(items, list):  # draft-4 tuple form
            prefix, items = items, None
        prefix_checks = [self.compile(s, depth + 1) for s in prefix] if prefix else []
        item_check = self.compile(items, depth + 1) if items is not None else None
        if prefix_checks or item_check:

            def check_items(v: Any, p: str) -> SchemaViolation | None:
                if type(v) is not list:
                    return None
                for i, item in enumerate(v):
                    c = prefix_checks[i] if i < len(prefix_checks) else item_check
                    if c is not None:
                        err = c(item, f"{p}[{i}]")
                        if err is not None:
                            return err
                return None

            out.append(check_items)
        lo, hi = schema.get("minItems"), schema.get("maxItems")
        unique = bool(schema.get("uniqueItems"))
        if lo is not None or hi is not None or unique:

            def check_count(v: Any, p: str) -> SchemaViolation | None:
                if type(v) is not list:
                    return None
                if lo is not None and len(v) < lo:
                    return SchemaViolation(p, f"{_label(p)}: needs at least {lo} items")
                if hi is not None and len(v) > hi:
                    return SchemaViolation(p, f"{_label(p)}: allows at most {hi} items")
                if unique and not _all_distinct(v):
                    return SchemaViolation(p, f"{_label(p)}: items must be unique")
                return None

            out.append(check_count)
        return out

    def _object_checks(self, schema: dict[str, Any], depth: int) -> list[Check]:
        props_schema = schema.get("properties") or {}
        required = list(schema.get("required") or [])
        extra = schema.get("additionalProperties", True)
        lo, hi = schema.get("minProperties"), schema.get("maxProperties")
        if not props_schema and not required and extra is True and lo is None and hi is None:
            return []
        known = set(props_schema)
        required_set = set(required)
        # (name, check, python types that pass at once, required); the fast types
        # let the common "plain typed field" skip the closure call
        props = [
            (name, self.compile(sub, depth + 1), _plain_types(sub), name in required_set)
            for name, sub in props_schema.items()
        ]
        # Required names without a declared property are checked first.
        orphans = [r for r in required if r not in known]
        extra_check = self.compile(extra, depth + 1) if isinstance(extra, dict) else None
        forbid_extra = extra is False
        absent = object()

        def check_object(v: Any, p: str) -> SchemaViolation | None:
            if type(v) is not dict:
                return None
            prefix = f"{p}." if p else ""
            for name in orphans:
                if name not in v:
                    return SchemaViolation(prefix + name, f"field '{prefix}{name}': required field is missing")
            for name, check, plain, needed in props:
                val = v.get(name, absent)
                if val is absent:
                    if needed:
                        return SchemaViolation(prefix + name, f"field '{prefix}{name}': required field is missing")
                    continue
                if plain is not None and type(val) in plain:
                    continue
                err = check(val, prefix + name)
                if err is not None:
                    return err
            if (forbid_extra or extra_check is not None) and not v.keys() <= known:
                for name in v:
                    if name not in known:
                        if forbid_extra:
                            return SchemaViolation(
                                prefix + name, f"field '{prefix}{name}': unknown field, not allowed by the schema"
                            )
                        assert extra_check is not None
                        err = extra_check(v[name], prefix + name)
                        if err is not None:
                            return err
            if lo is not None and len(v) < lo:
                return SchemaViolation(p, f"{_label(p)}: needs at least {lo} fields")
            if hi is not None and len(v) > hi:
                return SchemaViolation(p, f"{_label(p)}: allows at most {hi} fields")
            return None

        return [check_object]

    @staticmethod
    def _any_of(branches: list[Check], key: str) -> Check:
        def check_any(v: Any, p: str) -> SchemaViolation | None:
            errors = [b(v, p) for b in branches]
            passed = sum(e is None for e in errors)
            if key == "anyOf" and passed:
                return None
            if key == "oneOf" and passed == 1:
                return None
            if passed > 1:
                return SchemaViolation(p, f"{_label(p)}: matches more than one allowed shape")
            first = next(e for e in errors if e is not None)
            return (
                first
                if len(branches) == 1
                else SchemaViolation(first.field, f"{first.message} (and no other allowed shape matches)")
            )

        return check_any


_PLAIN = {"integer": (int,), "string": (str,), "boolean": (bool,), "null": (type(None),)}


def _plain_types(schema: Any) -> tuple[type, ...] | None:
    """Python types that satisfy ``schema`` outright, when it says nothing but
    a plain type (``{"type": "integer", "description": ...}``)."""
    if not isinstance(schema, dict) or not set(schema) <= (_ANNOTATIONS | {"type"}):
        return None
    names = schema.get("type")
    names = [names] if isinstance(names, str) else names
    if not names or not all(n in _PLAIN for n in names):
        return None
    return tuple(t for n in names for t in _PLAIN[n])


def _all_distinct(items: list[Any]) -> bool:
    """uniqueItems: a set when the items are hashable scalars (the common
    case), their JSON spelling otherwise. ``1`` and ``True`` stay apart."""
    try:
        return len({(type(x), x) for x in items}) == len(items)
    except TypeError:
        return len({_compact(x) for x in items}) == len(items)


def _accept(value: Any, path: str) -> SchemaViolation | None:
    return None


def _type_check(types: list[str]) -> Check:
    wanted = " or ".join(types)
    single = types[0] if len(types) == 1 else None

    def check_type(v: Any, p: str) -> SchemaViolation | None:
        ok = _is_type(v, single) if single else any(_is_type(v, t) for t in types)
        if ok:
            return None
        return SchemaViolation(p, f"{_label(p)}: expected {wanted}, got {_json_type(v)} {_show(v)}")

    return check_type


def _enum_check(values: list[Any]) -> Check:
    shown = ", ".join(_show(x, 30) for x in values[:10]) + (", …" if len(values) > 10 else "")

    def check_enum(v: Any, p: str) -> SchemaViolation | None:
        for allowed in values:
            if type(allowed) is type(v) and allowed == v:
                return None
            if type(allowed) in (int, float) and type(v) in (int, float) and allowed == v:
                return None
        return SchemaViolation(p, f"{_label(p)}: {_show(v)} is not one of {shown}")

    return check_enum


def _number_checks(schema: dict[str, Any]) -> list[Check]:
    bounds = {k: schema[k] for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema}
    step = schema.get("multipleOf")
    if not bounds and step is None:
        return []
    lo, hi = bounds.get("minimum"), bounds.get("maximum")
    xlo, xhi = bounds.get("exclusiveMinimum"), bounds.get("exclusiveMaximum")
    # draft-4 boolean exclusives
    if xlo is True:
        xlo, lo = lo, None
    if xhi is True:
        xhi, hi = hi, None
    if xlo is False:
        xlo = None
    if xhi is False:
        xhi = None

    def check_number(v: Any, p: str) -> SchemaViolation | None:
        if type(v) not in (int, float):
            return None
        if lo is not None and v < lo:
            return SchemaViolation(p, f"{_label(p)}: {v} is less than the minimum {lo}")
        if hi is not None and v > hi:
            return SchemaViolation(p, f"{_label(p)}: {v} is greater than the maximum {hi}")
        if xlo is not None and v <= xlo:
            return SchemaViolation(p, f"{_label(p)}: {v} must be greater than {xlo}")
        if xhi is not None and v >= xhi:
            return SchemaViolation(p, f"{_label(p)}: {v} must be less than {xhi}")
        if step and not _multiple(v, step):
            return SchemaViolation(p, f"{_label(p)}: {v} is not a multiple of {step}")
        return None

    return [check_number]


def _multiple(v: int | float, step: int | float) -> bool:  # int | float: compiled code keeps ints exact
    if type(v) is int and type(step) is int:
        return v % step == 0
    try:
        return math.isclose(v / step, round(v / step), abs_tol=1e-9)
    except OverflowError:
        return False


def _uses_only_supported(schema: Any, depth: int = 0) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key not in _SUPPORTED:
            return False
        if key in ("properties", "$defs", "definitions"):
            if not isinstance(value, dict) or not all(_uses_only_supported(s, depth + 1) for s in value.values()):
                return False
        elif key in ("items", "additionalProperties"):
            subs = value if isinstance(value, list) else [value]
            if not all(_uses_only_supported(s, depth + 1) for s in subs):
                return False
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            if not isinstance(value, list) or not all(_uses_only_supported(s, depth + 1) for s in value):
                return False
        elif key == "type":
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not all(
                n in ("integer", "number", "string", "boolean", "object", "array", "null") for n in names
            ):
                return False
    return True


def _same_level_refs(schema: Any) -> list[str]:
    """The $refs a schema applies to the same value (directly or through allOf/anyOf/oneOf)."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("$ref"), str):
            found.append(node["$ref"])
        for key in ("allOf", "anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                stack.extend(node[key])
    return found


def _ref_loop(compiler: _Compiler) -> str | None:
    """A $ref that reaches itself without a step into the value (properties, items…), or None.
    Such a schema would check one value forever: rejected when the tool is loaded, not met
    as a crash (compiled code has no recursion limit) when a call comes."""
    # every $ref met while compiling is in compiler.refs, so every edge ends at a key
    edges = {ref: _same_level_refs(compiler.resolve(ref)) for ref in {"#", *compiler.refs}}
    done: set[str] = set()
    for start in sorted(edges):
        on_path: set[str] = set()
        stack: list[tuple[str, int]] = [(start, 0)]  # (ref, index of its next edge): an iterative DFS
        while stack:
            ref, i = stack.pop()
            if i == 0:
                if ref in on_path:
                    return ref
                if ref in done:
                    continue
                on_path.add(ref)
            nexts = edges.get(ref, [])
            if i < len(nexts):
                stack += [(ref, i + 1), (nexts[i], 0)]
            else:
                on_path.discard(ref)
                done.add(ref)
    return None


class ArgumentValidator:
    """Validates one tool's arguments against its JSON Schema, strictly."""

    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        _check_schema(schema)
        try:
            self._recursive = False
            if _uses_only_supported(schema):
                compiler = _Compiler(schema)
                self._check: Check = compiler.compile(schema)
                self._recursive = bool(compiler.refs)
                loop = _ref_loop(compiler) if compiler.refs else None
                if loop is not None:
                    raise ToolSpecError(
                        f"$ref {loop!r} leads back to itself without going into the value: checking it would never end"
                    )
            else:
                self._check = _library_check(schema)
        except re.error as exc:
            raise ToolSpecError(f"invalid pattern in the schema: {exc}") from None
        except RecursionError:
            raise ToolSpecError("the schema nests too deeply") from None
        self._memo: dict[Any, SchemaViolation | None] = {}

    def validate(self, arguments: Any, key: Any = None) -> SchemaViolation | None:
        """Return the first violation, or None when the arguments are valid.

        Arguments that are not an object (a JSON string that did not parse, a
        list) fail as a whole. ``key`` is ``memo_key(arguments)`` when the
        caller has it already.
        """
        if type(arguments) is str:
            return SchemaViolation("", f"arguments are not valid JSON: {_show(arguments)}")
        if type(arguments) is not dict:
            return SchemaViolation("", f"arguments must be a JSON object, got {_json_type(arguments)}")
        if key is None:
            key = memo_key(arguments)
        if key is None:
            return self._run(arguments)
        memo = self._memo
        if key in memo:
            return memo[key]
        result = self._run(arguments)
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[key] = result
        return result

    def _run(self, arguments: dict[str, Any]) -> SchemaViolation | None:
        # Only a self-referencing schema follows a value down without limit: bound it
        # explicitly, as compiled code (setup.py) would not stop at the recursion limit.
        if self._recursive and _nests_deeper(arguments, _MAX_VALUE_DEPTH):
            return SchemaViolation("", "arguments nest deeper than the schema allows to check")
        try:
            return self._check(arguments, "")
        except RecursionError:  # a self-referencing schema met a deep value
            return SchemaViolation("", "arguments nest deeper than the schema allows to check")


_MAX_VALUE_DEPTH = 200  # levels of objects and arrays checked against a recursive schema


def _nests_deeper(value: Any, limit: int) -> bool:
    """True when objects and arrays nest more than ``limit`` levels (iterative, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            children: Any = item.values()
        elif type(item) is list:
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


_MEMO_SIZE = 1024  # per tool: enough for the repeats of a run, small enough to stay flat


def memo_key(arguments: dict[str, Any]) -> Any:
    """A hashable key for flat arguments (names, values and their exact types,
    so that ``1``, ``1.0`` and ``True`` stay apart), or None when a value is a
    list or an object. Agents repeat the same arguments across trials: the
    result of a pure check on them is worth keeping."""
    values = tuple(arguments.values())
    try:
        return (tuple(arguments), values, tuple(map(type, values)), hash(values))
    except TypeError:
        return None


def _check_schema(schema: dict[str, Any]) -> None:
    """Refuse a schema that is not valid JSON Schema (``minLength: "3"``,
    ``enum: 5``, ``anyOf: []``, a bad pattern) when the suite is loaded, not
    when the first call meets it."""
    if plainly_valid(schema):  # the common case, without loading jsonschema
        return
    import jsonschema
    from jsonschema import validators

    base = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ToolSpecError(f"invalid JSON Schema at {where}: {exc.message}") from None
    except RecursionError:
        raise ToolSpecError("the schema nests too deeply") from None


def _library_check(schema: dict[str, Any]) -> Check:
    """Fallback for schemas beyond the compiled subset, with strict types."""
    import jsonschema
    from jsonschema import validators

    base = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolSpecError(f"invalid JSON Schema: {exc.message}") from exc
    checker = base.TYPE_CHECKER.redefine_many(
        {
            "integer": lambda _c, v: type(v) is int,
            "number": lambda _c, v: type(v) in (int, float),
        }
    )
    strict = validators.extend(base, type_checker=checker)  # type: ignore[no-untyped-call]
    validator = strict(schema, format_checker=base.FORMAT_CHECKER)

    def check_library(v: Any, p: str) -> SchemaViolation | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(v))
        if error is None:
            return None
        field = ".".join(str(x) for x in error.absolute_path)
        return SchemaViolation(field, f"{_label(field)}: {error.message}")

    return check_library
