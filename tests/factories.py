"""Test data builders: one place for the small banking suite and records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.core.records import Trajectory, parse_record
from app.core.suites.suite import Suite, load_suite_document, parse_suite
from app.settings import Settings
from app.web.app import create_app

BANKING_TOOLS: list[dict[str, Any]] = [
    {
        "name": "buscar_cliente",
        "description": "Busca un cliente por su RUT (12345678-9) y devuelve su id interno.",
        "parameters": {
            "type": "object",
            "properties": {"rut": {"type": "string", "pattern": r"^\d{7,8}-[\dkK]$"}},
            "required": ["rut"],
            "additionalProperties": False,
        },
        "mock": {"id": 8812, "nombre": "Ana Rojas"},
    },
    {
        "name": "ver_saldo",
        "description": "Devuelve el saldo en pesos. Requiere el id interno (entero), no el RUT.",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
            "additionalProperties": False,
        },
        "mock": {"saldo": 142900},
    },
    {
        "name": "verificar_compra",
        "description": "Verifica una compra del cliente.",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "compra": {"type": "string"}},
            "required": ["id", "compra"],
        },
        "mock": {"verificada": True},
    },
    {
        "name": "emitir_nota_credito",
        "description": "Emite una nota de crédito. IRREVERSIBLE.",
        "parameters": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "monto": {"type": "integer"},
                "motivo": {"type": "string"},
            },
            "required": ["id", "monto", "motivo"],
            "additionalProperties": False,
        },
        "mock": {"response": {"nota": "NC-40021", "estado": "emitida"}, "effect": {"append": "notas_credito"}},
    },
    {
        "name": "buscar_pedido",
        "description": "Busca un pedido por su número (PED-12345).",
        "parameters": {
            "type": "object",
            "properties": {"numero": {"type": "string"}, "fecha": {"type": "string", "format": "date"}},
            "required": ["numero"],
        },
        "mock": {"estado": "despachado"},
    },
    {
        "name": "buscar_producto",
        "description": "Busca un producto.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "mock": {"productos": []},
    },
]

SALDO_CASE: dict[str, Any] = {
    "id": "saldo-001",
    "question": "¿Cuál es el saldo del cliente 12345678-9?",
    "expected_calls": [
        {"name": "buscar_cliente", "arguments": {"rut": "12345678-9"}},
        {"name": "ver_saldo", "arguments": {"id": 8812}},
    ],
    "expected_datum": "142900",
}


def banking_suite(*cases: dict[str, Any], **extra: Any) -> Suite:
    """The banking toolset with the given cases (the saldo case by default)."""
    doc: dict[str, Any] = {
        "name": "banca",
        "toolset": BANKING_TOOLS,
        "cases": list(cases) or [SALDO_CASE],
        **extra,
    }
    return parse_suite(doc)


def call(name: str, arguments: Any = None, observation: str = "{}", error: Any = None) -> dict[str, Any]:
    return {"name": name, "arguments": arguments or {}, "observation": observation, "error": error}


def injected(kind: str = "http_503", message: str = "ERROR 503: servicio no disponible") -> dict[str, Any]:
    return {"kind": kind, "message": message, "injected": True}


def record(
    case_id: str = "saldo-001",
    calls: list[dict[str, Any]] | None = None,
    answer: str = "",
    trial: int = 0,
    fault: dict[str, Any] | None = None,
    **extra: Any,
) -> Trajectory:
    return parse_record(
        {
            "case_id": case_id,
            "trial": trial,
            "question": "¿Cuál es el saldo del cliente 12345678-9?",
            "calls": calls or [],
            "answer": answer,
            "fault": fault,
            **extra,
        }
    )


OK_CLIENTE = call("buscar_cliente", {"rut": "12345678-9"}, '{"id": 8812, "nombre": "Ana Rojas"}')
OK_SALDO = call("ver_saldo", {"id": 8812}, '{"saldo": 142900}')
FAIL_SALDO = call("ver_saldo", {"id": 8812}, "ERROR 503: servicio no disponible", injected())


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@contextmanager
def examples_client(db_url: str, *names: str) -> Iterator[TestClient]:
    """The app on ``db_url`` holding the example runs: ``"v1"`` stores the v1
    suite and trajectories as run ``v1``; ``"banca-v2"`` the v2 ones as ``banca-v2``."""
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        for name in names:
            version = name.rsplit("-", 1)[-1]
            doc = load_suite_document(EXAMPLES / f"suite_{version}.yaml")
            rid = c.post("/api/runs", json={"name": name, "suite": doc}).json()["id"]
            recs = [json.loads(x) for x in (EXAMPLES / f"trajectories_{version}.jsonl").read_text().splitlines()]
            assert c.post(f"/api/runs/{rid}/trajectories", json={"trajectories": recs}).status_code == 200
        yield c
