"""Strict validation: no coercion, formats checked, the first failing field named."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from app.core.suites.metacheck import plainly_valid
from app.core.suites.schema import ArgumentValidator
from tests.resources import DATA, shared_data

NOTA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "monto": {"type": "integer", "minimum": 1},
        "fecha": {"type": "string", "format": "date"},
        "motivo": {"type": "string", "enum": ["falla", "devolucion"]},
    },
    "required": ["id", "monto"],
    "additionalProperties": False,
}


def first(schema: dict[str, Any], args: Any) -> tuple[str, str] | None:
    v = ArgumentValidator(schema).validate(args)
    return None if v is None else (v.field, v.message)


@pytest.mark.parametrize(
    ("args", "field", "fragment"),
    [
        ({"id": "8812", "monto": 1}, "id", "expected integer, got string '8812'"),
        ({"id": 8812, "monto": "15.000"}, "monto", "expected integer, got string '15.000'"),
        ({"id": 8812.0, "monto": 1}, "id", "expected integer, got number 8812.0"),
        ({"id": True, "monto": 1}, "id", "expected integer, got boolean"),
        ({"monto": 1}, "id", "required field is missing"),
        ({"id": 1, "monto": 1, "extra": 2}, "extra", "unknown field"),
        ({"id": 1, "monto": 1, "fecha": "el martes pasado"}, "fecha", "expected a date YYYY-MM-DD"),
        ({"id": 1, "monto": 1, "fecha": "2024-02-30"}, "fecha", "expected a date"),
        ({"id": 1, "monto": 0}, "monto", "less than the minimum 1"),
        ({"id": 1, "monto": 1, "motivo": "otro"}, "motivo", "is not one of"),
    ],
)
def test_strict_failures_name_the_field(args: dict[str, Any], field: str, fragment: str) -> None:
    result = first(NOTA, args)
    assert result is not None
    assert result[0] == field
    assert fragment in result[1]
    assert f"'{field}'" in result[1]


def test_valid_arguments_pass() -> None:
    assert first(NOTA, {"id": 8812, "monto": 15000, "fecha": "2024-03-05", "motivo": "falla"}) is None


def test_first_failing_field_in_schema_order() -> None:
    assert first(NOTA, {"id": "x", "monto": "y"}) == ("id", "field 'id': expected integer, got string 'x'")


def test_unparseable_and_non_object_arguments_fail_whole() -> None:
    assert first(NOTA, '{"id": 88') == ("", "arguments are not valid JSON: '{\"id\": 88'")
    assert first(NOTA, [1, 2]) == ("", "arguments must be a JSON object, got array")


def test_nested_paths_and_refs() -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1}},
        "required": ["items"],
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}},
    }
    assert first(schema, {"items": [{"sku": "a"}, {"sku": 3}]}) == (
        "items[1].sku",
        "field 'items[1].sku': expected string, got integer 3",
    )
    assert first(schema, {"items": []}) == ("items", "field 'items': needs at least 1 items")
    assert first(schema, {"items": [{"sku": "a"}]}) is None


def test_nullable_via_any_of() -> None:
    schema = {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    assert first(schema, {"n": None}) is None
    assert first(schema, {"n": 3}) is None
    assert first(schema, {"n": "3"}) is not None


def test_unsupported_keywords_fall_back_to_jsonschema_strictly() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "patternProperties": {"^x_": {"type": "string"}},
    }
    assert first(schema, {"a": 1, "x_1": "ok"}) is None
    bad = first(schema, {"a": 1, "x_1": 5})
    assert bad is not None and bad[0] == "x_1"
    strict = first(schema, {"a": 1.0})
    assert strict is not None and strict[0] == "a"


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}}, "properties/a/pattern"),
        ({"type": "object", "properties": {"a": {"minLength": "3"}}}, "properties/a/minLength"),
        ({"type": "object", "properties": {"a": {"enum": 5}}}, "properties/a/enum"),
        ({"anyOf": []}, "anyOf"),
        ({"type": "object", "required": "n"}, "required"),
    ],
)
def test_invalid_schemas_are_refused_at_load(schema: dict[str, Any], fragment: str) -> None:
    from app.core.errors import ToolSpecError

    with pytest.raises(ToolSpecError, match=f"invalid JSON Schema at {fragment}"):
        ArgumentValidator(schema)


def _jsonschema_accepts(schema: Any) -> bool:
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except (jsonschema.SchemaError, TypeError, AttributeError):  # the last two: a `$schema` that is no string
        return False
    return True


@pytest.mark.parametrize(
    "schema",
    [
        {"required": ["a", "a"]},
        {"type": ["string", "string"]},
        {"type": []},
        {"type": "text"},
        {"items": [{"type": "string"}]},  # an array of schemas is draft 7's items, not 2020-12's
        {"multipleOf": 0},
        {"minimum": True},
        {"maxLength": -1},
        {"pattern": "(["},
        {"anyOf": []},
        {"properties": {"a": None}},
        {"description": 3},
    ],
)
def test_the_quick_check_leaves_invalid_schemas_to_jsonschema(schema: dict[str, Any]) -> None:
    assert not plainly_valid(schema)
    assert not _jsonschema_accepts(schema)


def test_the_quick_check_vouches_only_for_schemas_jsonschema_accepts() -> None:
    values: list[Any] = [
        None,
        True,
        0,
        -1,
        3,
        2.5,
        0.0,
        float("nan"),
        "",
        "string",
        "(",
        "^a+$",
        "#",
        "#/$defs/x",
        "#/a b",
        ["a"],
        ["a", "a"],
        [],
        ["string", "null"],
        [1],
        {},
        {"a": 1},
        [{}],
        [{"type": "x"}],
        {"type": "string"},
    ]
    keys = [
        "type",
        "enum",
        "const",
        "required",
        "pattern",
        "format",
        "minLength",
        "maximum",
        "multipleOf",
        "uniqueItems",
        "$ref",
        "description",
        "examples",
        "items",
        "additionalProperties",
        "anyOf",
        "prefixItems",
        "properties",
        "$defs",
        "$schema",
        "not",
        "nullable",
    ]
    rng = random.Random(23)

    def schema(depth: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in rng.sample(keys, rng.randint(1, 4)):
            nested = depth < 2 and rng.random() < 0.5
            if nested and key in ("items", "additionalProperties"):
                out[key] = schema(depth + 1)
            elif nested and key in ("anyOf", "prefixItems"):
                out[key] = [schema(depth + 1) for _ in range(rng.randint(1, 2))]
            elif nested and key in ("properties", "$defs"):
                out[key] = {"p": schema(depth + 1)}
            else:
                out[key] = rng.choice(values)
        return out

    verdicts = [(plainly_valid(s), _jsonschema_accepts(s)) for s in (schema() for _ in range(2000))]
    assert (True, False) not in verdicts
    assert verdicts.count((True, True)) > 100 and verdicts.count((False, False)) > 100


@shared_data(DATA / "tau_bench_tool_schemas_airline_retail.json")
def test_real_tool_schemas_are_vouched_for_without_jsonschema() -> None:
    tools = json.loads((DATA / "tau_bench_tool_schemas_airline_retail.json").read_text(encoding="utf-8"))
    schemas = [tool["function"]["parameters"] for domain in tools.values() for tool in domain]
    assert len(schemas) == 14 + 16
    assert all(plainly_valid(s) and _jsonschema_accepts(s) for s in schemas)


def test_recursive_schemas_and_huge_numbers() -> None:
    v = ArgumentValidator({"type": "object", "properties": {"x": {"$ref": "#"}}})
    assert v.validate({"x": {"x": {}}}) is None
    assert v.validate({"x": 3}) is not None
    deep: dict[str, Any] = {}
    cur = deep
    for _ in range(3000):
        cur["x"] = {}
        cur = cur["x"]
    violation = v.validate(deep)
    assert violation is not None and "deeper" in violation.message
    m = ArgumentValidator({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}})
    assert m.validate({"n": 3 * 10**400}) is None
    assert m.validate({"n": 3 * 10**400 + 1}) is not None
