"""Throughput and memory benchmark of the scoring path (what ``toollens score`` runs).

It builds an in-memory suite (7 banking tools with strict JSON Schemas, 20
cases of 3 to 6 expected calls, toolset-level dependency pairs, per-field
tolerance rules, expected data), writes N synthetic trajectories to a
temporary JSONL file with every failure family present at realistic rates,
and times the real path, parsing included::

    score_trajectories(suite, read_jsonl(path), keep_cases=False)

Generation is not timed. Each size is scored in a fresh subprocess so that its
peak RSS (``ru_maxrss``) belongs to that size alone; the script reports the
peak RSS and its growth over the baseline taken just before scoring. A second,
separate subprocess per size measures the ``tracemalloc`` peak of the scoring
phase only (tracemalloc slows Python down several times, so its run is never
the one that is timed). Everything is seeded: the same seed writes the same
files and prints the same counts.

With 20 cases, a million calls means thousands of trials per case, so the same
arguments and texts come back again and again, and any memo or cache in the
scorer hits far more often than it would on a large, varied run. Use
``--cases 2000`` to see throughput and memory when repeats are rare.

Usage::

    python bench/score_bench.py                 # 10^4, 10^5 and 10^6 calls
    python bench/score_bench.py --quick         # 2,000 and 20,000 calls, a few seconds
    python bench/score_bench.py --sizes 5000 200000 --no-trace
    python bench/score_bench.py --cases 2000 --no-trace   # fewer repeated arguments
    python bench/score_bench.py --real          # real tau-bench trajectories, whole `toollens score` process

``--real`` converts the tau-bench gpt-4o airline sample (621 calls with long
tool outputs; read from ``--data``, by default ``shared/data`` beside the
repository's folder) with ``toollens convert``, repeats its trajectories to
about 60,000 calls (each copy's trials renumbered), and times whole
``toollens score --json`` processes as the console script runs them
(``python -m app.entry``), start-up and reading included, compiled (when this
checkout is) and as Python source, beside the floor (``score_floor.py``: orjson,
a compiled schema validator and an exact match, no ToolLens) and, with
``--against DIR``, another checkout: interleaved, the median of ``--repeat``
runs (3 unless given), in calls per CPU second of the process and as a share
of the floor's. The processes keep their ``.pyc`` files, as an installed
ToolLens does. ``--no-blame`` adds each tree as Python source with the blame of
failed conversations switched off (what the blame costs; the compiled build
binds the call at build time, so it has no such variant).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostref

from app import buildinfo
from app.core.records import FAULT_KINDS, TRANSIENT_KINDS, read_jsonl
from app.core.reports.evaluate import score_trajectories
from app.core.reports.report import Report
from app.core.score.families import RATIO_KEYS
from app.core.suites.suite import Suite, parse_suite

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (2_000, 20_000)
TARGET_CALLS_PER_SECOND = 100_000
N_CASES = 20

# Per expected step.
P_MISSING = 0.02  # the step is skipped
P_CONFUSED = 0.03  # a look-alike tool is called instead
P_SCHEMA = 0.04  # the arguments fail the schema (then often a corrected retry)
P_MISMATCH = 0.04  # valid arguments, wrong value beyond the case's tolerance
P_JSON_TEXT = 0.15  # arguments sent as a JSON string, as OpenAI does (valid)
P_RETRY_AFTER_SCHEMA = 0.6
# Per trajectory.
P_EXTRA = 0.12  # an extra call to a real tool
P_HALLUCINATED = 0.02  # a call to a tool that does not exist
P_DEPENDENCY = 0.04  # a declared pair is run in the wrong order
P_FAULT = 0.20  # an injected fault
OUTCOME_WEIGHTS = {"recovered": 0.50, "gave_up": 0.25, "hallucinated": 0.15, "confused": 0.10}

HALLUCINATED_NAMES = ("cancelar_pedido", "consultar_saldo", "buscar_usuario", "anular_compra")
LOOKALIKES: dict[str, tuple[str, ...]] = {
    "buscar_cliente": ("buscar_pedido",),
    "ver_saldo": ("verificar_compra",),
    "verificar_compra": ("buscar_pedido", "ver_saldo"),
    "emitir_nota_credito": ("iniciar_devolucion",),
    "buscar_pedido": ("buscar_producto", "verificar_compra"),
    "buscar_producto": ("buscar_pedido",),
    "iniciar_devolucion": ("emitir_nota_credito",),
}
FAULT_MESSAGES = {
    "timeout": "ERROR: timeout, el servicio no respondió en 30 s",
    "http_429": "ERROR 429: demasiadas solicitudes",
    "http_503": "ERROR 503: servicio no disponible",
    "http_500": "ERROR 500: error interno del servidor",
    "not_found": "ERROR 404: recurso no encontrado",
    "malformed": '{"saldo": 14<<truncated',
}
GIVE_UP_ANSWERS = (
    "No pude completar la consulta, el servicio no está disponible. Intenta más tarde.",
    "No logré obtener la información en este momento.",
    "Lo siento, hubo un problema con el sistema y no fue posible terminar.",
    "I'm sorry, but I could not complete the request right now.",
)
CONFUSED_ANSWERS = (
    "Estoy revisando tu solicitud con el equipo correspondiente.",
    "Tu solicitud quedó registrada, te contactaremos pronto.",
    "Revisé la información disponible de tu cuenta.",
)
NOTA_MOTIVOS = (
    "cobro duplicado",
    "Cobro duplicado de la compra",
    "cargo duplicado en la tarjeta",
    "reembolso por cobro duplicado",
)
DEVOLUCION_MOTIVOS = ("producto defectuoso", "llegó dañado", "no enciende", "defecto de fábrica")
NAMES = ("Ana Rojas", "Luis Soto", "Carla Muñoz", "Pedro Díaz", "Marta Vera", "José Pérez")
PRODUCTS = ("audífonos inalámbricos", "hervidor eléctrico", "silla de escritorio", "mochila urbana")
CATEGORIES = ("electronica", "hogar", "oficina", "deporte")


# -- the suite -----------------------------------------------------------------

_RUT = r"^\d{7,8}-[\dkK]$"
_COMPRA = r"^C-\d{6}$"
_PEDIDO = r"^PED-\d{5}$"
_SKU = r"^SKU-\d{4}$"


def _obj(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


TOOLS: list[dict[str, Any]] = [
    {
        "name": "buscar_cliente",
        "description": "Busca un cliente por su RUT (formato 12345678-9) y devuelve su id interno.",
        "parameters": _obj({"rut": {"type": "string", "pattern": _RUT}}, ["rut"]),
        "mock": {"id": 8812, "nombre": "Ana Rojas"},
    },
    {
        "name": "ver_saldo",
        "description": "Saldo de la cuenta. Requiere el id interno (entero), no el RUT.",
        "parameters": _obj(
            {"id": {"type": "integer", "minimum": 1}, "moneda": {"type": "string", "enum": ["CLP", "USD"]}},
            ["id"],
        ),
        "mock": {"saldo": 142900, "moneda": "CLP"},
    },
    {
        "name": "verificar_compra",
        "description": "Verifica que una compra (C-123456) pertenece al cliente.",
        "parameters": _obj(
            {
                "id": {"type": "integer", "minimum": 1},
                "compra": {"type": "string", "pattern": _COMPRA},
                "fecha": {"type": "string", "format": "date"},
            },
            ["id", "compra"],
        ),
        "mock": {"verificada": True},
    },
    {
        "name": "emitir_nota_credito",
        "description": "Emite una nota de crédito. IRREVERSIBLE: verificar la compra antes.",
        "parameters": _obj(
            {
                "id": {"type": "integer", "minimum": 1},
                "compra": {"type": "string", "pattern": _COMPRA},
                "monto": {"type": "integer", "minimum": 1, "maximum": 5_000_000},
                "motivo": {"type": "string", "minLength": 5, "maxLength": 200},
            },
            ["id", "compra", "monto", "motivo"],
        ),
        "mock": {"response": {"nota": "NC-40021", "estado": "emitida"}, "effect": {"append": "notas_credito"}},
    },
    {
        "name": "buscar_pedido",
        "description": "Busca un pedido por su número (PED-12345). No busca productos.",
        "parameters": _obj(
            {"numero": {"type": "string", "pattern": _PEDIDO}, "fecha": {"type": "string", "format": "date"}},
            ["numero"],
        ),
        "mock": {"estado": "despachado"},
    },
    {
        "name": "buscar_producto",
        "description": "Busca productos del catálogo por texto. No busca pedidos.",
        "parameters": _obj(
            {
                "q": {"type": "string", "minLength": 2},
                "categoria": {"type": "string", "enum": list(CATEGORIES)},
                "max_resultados": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            ["q"],
        ),
        "mock": {"productos": []},
    },
    {
        "name": "iniciar_devolucion",
        "description": "Inicia la devolución de ítems (SKU-1234) de un pedido ya verificado.",
        "parameters": _obj(
            {
                "pedido": {"type": "string", "pattern": _PEDIDO},
                "items": {
                    "type": "array",
                    "items": {"type": "string", "pattern": _SKU},
                    "minItems": 1,
                    "uniqueItems": True,
                },
                "motivo": {"type": "string", "minLength": 5},
                "fecha_retiro": {"type": "string", "format": "date"},
            },
            ["pedido", "items", "motivo"],
        ),
        "mock": {"devolucion": "DEV-10001", "estado": "creada"},
    },
]

TOOLSET_PAIRS = [
    ["buscar_cliente", "ver_saldo"],
    ["buscar_cliente", "verificar_compra"],
    ["verificar_compra", "emitir_nota_credito"],
    ["buscar_pedido", "iniciar_devolucion"],
]


@dataclass(frozen=True)
class Customer:
    """The fixed data behind one case: what the mocks answer for it."""

    rut: str
    id: int
    nombre: str
    saldo: int
    compra: str
    monto: int
    pedido: str
    fecha: str
    retiro: str
    skus: tuple[str, ...]
    producto: str
    categoria: str
    nota: str
    devolucion: str


@dataclass
class Step:
    """One expected call with the observation a correct call receives."""

    name: str
    arguments: dict[str, Any]
    observation: str
    tolerance: dict[str, Any] = field(default_factory=dict)


@dataclass
class CasePlan:
    """A case as the generator sees it: the suite entry plus how to answer."""

    id: str
    question: str
    steps: list[Step]
    datum: str
    answer: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_suite_case(self) -> dict[str, Any]:
        calls = []
        for s in self.steps:
            ec: dict[str, Any] = {"name": s.name, "arguments": s.arguments}
            if s.tolerance:
                ec["tolerance"] = s.tolerance
            calls.append(ec)
        return {
            "id": self.id,
            "question": self.question,
            "expected_calls": calls,
            "expected_datum": self.datum,
            **self.extra,
        }


def _pesos(amount: int) -> str:
    return "$" + f"{amount:,}".replace(",", ".")


def _customer(rng: random.Random) -> Customer:
    body = rng.randrange(10_000_000, 25_000_000)
    day = date(2024, 1, 1) + timedelta(days=rng.randrange(300))
    return Customer(
        rut=f"{body}-{rng.choice('0123456789K')}",
        id=rng.randrange(1_000, 99_999),
        nombre=rng.choice(NAMES),
        saldo=rng.randrange(10_000, 2_000_000),
        compra=f"C-{rng.randrange(100_000, 999_999)}",
        monto=rng.randrange(5, 300) * 500,
        pedido=f"PED-{rng.randrange(10_000, 99_999)}",
        fecha=day.isoformat(),
        retiro=(day + timedelta(days=7)).isoformat(),
        skus=tuple(f"SKU-{rng.randrange(1000, 9999)}" for _ in range(rng.randint(1, 3))),
        producto=rng.choice(PRODUCTS),
        categoria=rng.choice(CATEGORIES),
        nota=f"NC-{rng.randrange(40_000, 49_999)}",
        devolucion=f"DEV-{rng.randrange(10_000, 99_999)}",
    )


# Flow of each case: 0 saldo (3 calls), 1 pedido (5), 2 devolucion (6), 3 nota (6), 4 completo (6).
FLOW_NAMES = ("saldo", "pedido", "devolucion", "nota", "completo")
CASE_FLOWS = (0, 1, 2, 3, 4, 3, 4, 1, 2, 3, 4, 0, 1, 2, 3, 4, 3, 4, 1, 2)


def _obs(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


def _case_plan(index: int, c: Customer) -> CasePlan:
    """One of five flows of 3 to 6 expected calls (see ``CASE_FLOWS``)."""
    block = len(CASE_FLOWS)
    flow = CASE_FLOWS[index % block]
    nth = CASE_FLOWS[: index % block].count(flow)  # the how-manieth case of its flow in its block
    cid = f"{FLOW_NAMES[flow]}-{index:03d}"
    cliente = Step("buscar_cliente", {"rut": c.rut}, _obs({"id": c.id, "nombre": c.nombre}))
    saldo = Step(
        "ver_saldo",
        {"id": c.id, "moneda": "CLP"},
        _obs({"saldo": c.saldo, "moneda": "CLP"}),
        {"moneda": {"one_of": ["CLP", ""]}},
    )
    compra = Step(
        "verificar_compra",
        {"id": c.id, "compra": c.compra},
        _obs({"compra": c.compra, "monto": c.monto, "verificada": True}),
    )
    pedido = Step(
        "buscar_pedido",
        {"numero": c.pedido, "fecha": c.fecha},
        _obs({"pedido": c.pedido, "estado": "despachado", "fecha": c.fecha, "items": list(c.skus)}),
        {"fecha": "date"},
    )
    producto = Step(
        "buscar_producto",
        {"q": c.producto, "categoria": c.categoria, "max_resultados": 5},
        _obs({"productos": [{"sku": s, "nombre": c.producto} for s in c.skus]}),
        {"q": {"contains": c.producto.split()[0]}, "max_resultados": "ignore"},
    )
    nota = Step(
        "emitir_nota_credito",
        {"id": c.id, "compra": c.compra, "monto": c.monto, "motivo": "cobro duplicado"},
        _obs({"nota": c.nota, "estado": "emitida", "monto": c.monto}),
        {"monto": {"number": {"abs": 1}}, "motivo": {"contains": "duplicado"}},
    )
    saldo_final = Step(
        "ver_saldo",
        {"id": c.id},
        _obs({"saldo": c.saldo + c.monto, "moneda": "CLP"}),
    )
    devolucion = Step(
        "iniciar_devolucion",
        {"pedido": c.pedido, "items": list(c.skus), "motivo": "producto defectuoso", "fecha_retiro": c.retiro},
        _obs({"devolucion": c.devolucion, "estado": "creada", "retiro": c.retiro}),
        {"items": "set", "motivo": "ignore", "fecha_retiro": "date"},
    )
    pedido_final = Step(
        "buscar_pedido",
        {"numero": c.pedido},
        _obs({"pedido": c.pedido, "estado": "devolución en curso", "devolucion": c.devolucion}),
    )
    extra: dict[str, Any] = {"tags": [cid.split("-")[0]]}
    if flow == 0:
        steps = [cliente, saldo, compra]
        question = f"¿Cuál es el saldo del cliente {c.rut}? ¿Su compra {c.compra} está verificada?"
        datum = str(c.saldo)
        answer = f"El saldo de {c.nombre} es {_pesos(c.saldo)} y la compra {c.compra} está verificada."
        extra["forbidden_calls"] = ["emitir_nota_credito"]
    elif flow == 1:
        steps = [cliente, pedido, compra, producto, saldo_final]
        question = f"Soy {c.rut}, ¿en qué estado está mi pedido {c.pedido}?"
        datum = c.pedido
        answer = f"Tu pedido {c.pedido} fue despachado el {c.fecha}."
        if nth == 0:
            extra["match"] = "unordered"
        elif nth == 1:
            extra["match"] = "subset"
    elif flow == 2:
        steps = [cliente, pedido, compra, producto, devolucion, pedido_final]
        question = f"Quiero devolver los productos del pedido {c.pedido}; mi RUT es {c.rut}."
        datum = c.devolucion
        answer = f"Inicié la devolución {c.devolucion}; el retiro será el {c.retiro}."
        pedido.tolerance = {"fecha": "date", "numero": {"regex": _PEDIDO}}
    elif flow == 3:
        steps = [cliente, saldo, pedido, compra, nota, saldo_final]
        question = f"Me cobraron dos veces la compra {c.compra}. RUT {c.rut}. ¿Me pueden devolver el dinero?"
        datum = c.nota
        answer = f"Emití la nota de crédito {c.nota} por {_pesos(c.monto)}."
        if nth < 2:
            extra["expected_state"] = {"notas_credito": [{"id": c.id, "monto": c.monto}]}
    else:
        steps = [cliente, saldo, pedido, compra, nota, devolucion]
        question = f"RUT {c.rut}: la compra {c.compra} llegó defectuosa y además me la cobraron dos veces."
        datum = c.nota
        answer = f"Emití la nota de crédito {c.nota} e inicié la devolución {c.devolucion}."
    return CasePlan(cid, question, steps, datum, answer, extra)


def build_plans(seed: int, n_cases: int = N_CASES) -> list[CasePlan]:
    rng = random.Random(seed)
    return [_case_plan(i, _customer(rng)) for i in range(n_cases)]


def build_suite_doc(plans: Sequence[CasePlan]) -> dict[str, Any]:
    return {
        "name": "bench-banca",
        "toolset": {"label": "bench", "tools": TOOLS, "dependencies": TOOLSET_PAIRS},
        "give_up_phrases": ["sin respuesta del sistema"],
        "cases": [p.to_suite_case() for p in plans],
    }


def build_suite(seed: int, n_cases: int = N_CASES) -> tuple[Suite, list[CasePlan]]:
    plans = build_plans(seed, n_cases)
    return parse_suite(build_suite_doc(plans), path="<bench>"), plans


# -- synthetic trajectories ----------------------------------------------------


@dataclass
class GenCall:
    name: str
    arguments: Any
    observation: str | None
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "observation": self.observation, "error": self.error}


@dataclass
class GenStats:
    """What the generator wrote (its intended mix, before scoring)."""

    trajectories: int = 0
    calls: int = 0
    bytes: int = 0
    mix: dict[str, int] = field(default_factory=dict)

    def bump(self, key: str) -> None:
        self.mix[key] = self.mix.get(key, 0) + 1


def _wrong_value(name: str, value: Any, rng: random.Random) -> Any:
    """A schema-valid value that the case's tolerance rejects."""
    if name in ("id", "monto"):
        return int(value) + rng.randrange(1_000, 9_000)
    if name == "rut":
        return f"{rng.randrange(10_000_000, 25_000_000)}-{rng.randrange(10)}"
    if name == "compra":
        return f"C-{rng.randrange(100_000, 999_999)}"
    if name in ("numero", "pedido"):
        return f"PED-{rng.randrange(10_000, 99_999)}"
    if name in ("fecha", "fecha_retiro"):
        return (date.fromisoformat(value) + timedelta(days=rng.randint(1, 20))).isoformat()
    if name == "moneda":
        return "USD"
    if name == "categoria":
        return rng.choice([x for x in CATEGORIES if x != value])
    if name == "items":
        return [f"SKU-{rng.randrange(1000, 9999)}"]
    if name == "q":
        return "cargador usb"
    if name == "motivo":
        return "el cliente lo pidió"
    return value


_MISMATCHABLE = ("id", "monto", "rut", "compra", "numero", "pedido", "fecha", "moneda", "items", "q", "motivo")


class Generator:
    """Writes seeded synthetic trajectories for a suite and its case plans."""

    def __init__(self, suite: Suite, plans: Sequence[CasePlan], seed: int):
        self.suite = suite
        self.plans = list(plans)
        self.rng = random.Random(seed)
        self.validators = {t.name: t.validator for t in suite.toolset}
        self.pairs = [(a, b) for a, b in TOOLSET_PAIRS]

    def _rephrase(self, step: Step) -> dict[str, Any]:
        """Correct arguments as an agent writes them: free text and tolerated
        fields vary from trial to trial, within the case's tolerance."""
        rng = self.rng
        args = dict(step.arguments)
        if step.name == "emitir_nota_credito":
            args["motivo"] = rng.choice(NOTA_MOTIVOS)
        elif step.name == "iniciar_devolucion":
            args["motivo"] = rng.choice(DEVOLUCION_MOTIVOS)
            args["items"] = rng.sample(args["items"], len(args["items"]))
        elif step.name == "buscar_producto":
            args["q"] = rng.choice((args["q"], args["q"].split()[0], f"{args['q']} garantía"))
            args["max_resultados"] = rng.choice((5, 10, 20))
        elif step.name == "ver_saldo" and "moneda" in args and rng.random() < 0.3:
            del args["moneda"]
        return args

    def _schema_message(self, name: str, arguments: Any) -> str | None:
        violation = self.validators[name].validate(arguments)
        return None if violation is None else violation.message

    def _schema_failure(self, step: Step, stats: GenStats) -> GenCall:
        rng = self.rng
        args = dict(step.arguments)
        kind = rng.choice(("string_id", "missing_required", "bad_json", "extra_field", "format"))
        bad: Any = args
        if kind == "string_id" and isinstance(args.get("id"), int):
            args["id"] = str(args["id"])
        elif kind == "string_id" and isinstance(args.get("monto"), int):
            args["monto"] = f"{args['monto']:,}".replace(",", ".")
        elif kind == "bad_json":
            bad = json.dumps(args, ensure_ascii=False)[:-2]
        elif kind == "extra_field":
            args["cliente"] = "Ana Rojas"
        elif kind == "format" and "rut" in args:
            args["rut"] = args["rut"].replace("-", "")
        elif kind == "format" and "fecha" in args:
            args["fecha"] = date.fromisoformat(args["fecha"]).strftime("%d/%m/%Y")
        else:
            kind = "missing_required"
            del args[next(iter(args))]
        message = self._schema_message(step.name, bad)
        assert message is not None, (step.name, bad)
        stats.bump(f"schema:{kind}")
        return GenCall(step.name, bad, message, {"kind": "schema", "message": message, "injected": False})

    def _encode(self, call: GenCall) -> GenCall:
        if isinstance(call.arguments, dict) and self.rng.random() < P_JSON_TEXT:
            call.arguments = json.dumps(call.arguments, ensure_ascii=False)
        return call

    def _calls_for(self, plan: CasePlan, stats: GenStats) -> list[GenCall]:
        rng = self.rng
        calls: list[GenCall] = []
        for step in plan.steps:
            r = rng.random()
            if r < P_MISSING:
                stats.bump("missing_step")
                continue
            r -= P_MISSING
            if r < P_CONFUSED:
                stats.bump("confusion")
                name = rng.choice(LOOKALIKES[step.name])
                message = self._schema_message(name, step.arguments)
                err = None if message is None else {"kind": "schema", "message": message, "injected": False}
                calls.append(GenCall(name, dict(step.arguments), message or '{"resultados": []}', err))
                continue
            r -= P_CONFUSED
            if r < P_SCHEMA:
                calls.append(self._schema_failure(step, stats))
                if rng.random() < P_RETRY_AFTER_SCHEMA:
                    stats.bump("corrected_retry")
                    calls.append(GenCall(step.name, dict(step.arguments), step.observation))
                continue
            r -= P_SCHEMA
            args = self._rephrase(step)
            if r < P_MISMATCH:
                rules = step.tolerance
                fields = [k for k in args if k in _MISMATCHABLE and rules.get(k) != "ignore"]
                if fields:
                    key = rng.choice(fields)
                    args[key] = _wrong_value(key, args[key], rng)
                    stats.bump("argument_mismatch")
            calls.append(GenCall(step.name, args, step.observation))
        return calls

    def _dependency_violation(self, calls: list[GenCall], stats: GenStats) -> None:
        names = [c.name for c in calls]
        for before, after in self.rng.sample(self.pairs, len(self.pairs)):
            if before in names and after in names:
                i, j = names.index(before), names.index(after)
                if i < j:
                    calls[i], calls[j] = calls[j], calls[i]
                    stats.bump("dependency_swap")
                    return

    def _fault(self, plan: CasePlan, calls: list[GenCall], stats: GenStats) -> tuple[dict[str, Any], str]:
        """Inject one fault into a successful call; return the fault record and
        the answer for the outcome drawn."""
        rng = self.rng
        ok = [i for i, c in enumerate(calls) if c.error is None and c.name in self.validators]
        k = rng.choice(ok)
        kind = rng.choice(FAULT_KINDS)
        target = calls[k]
        message = FAULT_MESSAGES[kind]
        calls[k] = GenCall(target.name, target.arguments, message, {"kind": kind, "message": message, "injected": True})
        outcome = rng.choices(list(OUTCOME_WEIGHTS), weights=list(OUTCOME_WEIGHTS.values()))[0]
        stats.bump(f"fault:{outcome}")
        fault = {"step": k, "kind": kind}
        if outcome == "recovered":
            retry_ok = kind in TRANSIENT_KINDS or rng.random() < 0.5
            calls.insert(
                k + 1,
                GenCall(
                    target.name,
                    target.arguments,
                    target.observation if retry_ok else message,
                    None if retry_ok else {"kind": kind, "message": message, "injected": False},
                ),
            )
            return fault, plan.answer
        del calls[k + 1 :]
        if outcome == "gave_up":
            return fault, rng.choice(GIVE_UP_ANSWERS)
        if outcome == "hallucinated":
            if rng.random() < 0.5:
                return fault, plan.answer
            return fault, f"Listo, quedó registrado con el número {rng.randrange(100_000, 999_999)}."
        return fault, rng.choice(CONFUSED_ANSWERS)

    def trajectory(self, number: int, stats: GenStats) -> dict[str, Any]:
        rng = self.rng
        plan = self.plans[number % len(self.plans)]
        calls = self._calls_for(plan, stats)
        if rng.random() < P_EXTRA:
            stats.bump("extra_call")
            step = rng.choice(plan.steps)
            calls.insert(rng.randint(0, len(calls)), GenCall(step.name, dict(step.arguments), step.observation))
        if rng.random() < P_HALLUCINATED:
            stats.bump("hallucinated_tool")
            name = rng.choice(HALLUCINATED_NAMES)
            message = f"ERROR: la herramienta '{name}' no existe"
            calls.insert(
                rng.randint(0, len(calls)),
                GenCall(
                    name, {"numero": "PED-00001"}, None, {"kind": "unknown_tool", "message": message, "injected": False}
                ),
            )
        if rng.random() < P_DEPENDENCY:
            self._dependency_violation(calls, stats)
        fault: dict[str, Any] | None = None
        answer = plan.answer
        if rng.random() < P_FAULT and any(c.error is None for c in calls):
            fault, answer = self._fault(plan, calls, stats)
        return {
            "case_id": plan.id,
            "trial": number // len(self.plans),
            "question": plan.question,
            "calls": [self._encode(c).to_dict() for c in calls],
            "answer": answer,
            "fault": fault,
        }

    def write(self, out: IO[str], target_calls: int) -> GenStats:
        """Write trajectories until at least ``target_calls`` calls are written."""
        stats = GenStats()
        while stats.calls < target_calls:
            record = self.trajectory(stats.trajectories, stats)
            line = json.dumps(record, ensure_ascii=False) + "\n"
            out.write(line)
            stats.trajectories += 1
            stats.calls += len(record["calls"])
            stats.bytes += len(line.encode("utf-8"))
        return stats


# -- measuring -------------------------------------------------------------------


def _maxrss_mib() -> float:
    """Peak resident set size of this process so far (Linux: KiB, macOS: bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _figures(report: Report) -> dict[str, Any]:
    """The report's counters, without ``to_json`` (whose pass^k is not part of
    the scoring path and is slow when one case has thousands of trials)."""
    return {
        "ratios": {f: [report.ratio(f).num, report.ratio(f).den] for f in RATIO_KEYS},
        "outcomes": dict(report.outcomes),
        "failures": dict(sorted(report.failures.items())),
        "confusion_cells": len(report.confusion),
        "off_diagonal": sum(n for (e, c), n in report.confusion.items() if e != c),
        "violations": sum(report.violations.values()),
        "reactions": sum(report.reactions.values()),
    }


def measure(path: Path, seed: int, n_cases: int, trace: bool) -> dict[str, Any]:
    """Score ``path`` once in this process; run in a fresh subprocess."""
    suite, _ = build_suite(seed, n_cases)
    gc.collect()
    rss_before = _maxrss_mib()
    if trace:
        tracemalloc.start()
    start, cpu_start = time.perf_counter(), time.process_time()
    report = score_trajectories(suite, read_jsonl(path), keep_cases=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    traced_peak = 0.0
    if trace:
        traced_peak = tracemalloc.get_traced_memory()[1] / (1024 * 1024)
        tracemalloc.stop()
    rss_after = _maxrss_mib()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "calls": report.counts["hallucinated_tools.den"],
        "trajectories": report.trajectories,
        "rss_before_mib": rss_before,
        "rss_peak_mib": rss_after,
        "rss_delta_mib": rss_after - rss_before,
        "traced_peak_mib": traced_peak,
        "figures": _figures(report),
    }


def _run_child(path: Path, seed: int, n_cases: int, trace: bool) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(path),
        "--seed",
        str(seed),
        "--cases",
        str(n_cases),
    ]
    if trace:
        cmd.append("--trace")
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@dataclass
class Row:
    size: int
    gen: GenStats
    timing: dict[str, Any]
    traced_peak_mib: float | None

    @property
    def rate(self) -> float:
        """Scored calls per wall-clock second."""
        return float(self.timing["calls"]) / max(float(self.timing["seconds"]), 1e-9)

    @property
    def cpu_rate(self) -> float:
        """Scored calls per CPU second of the scoring process."""
        return float(self.timing["calls"]) / max(float(self.timing["cpu_seconds"]), 1e-9)


def _ratio(big: float, small: float) -> str:
    return f"{big / small:.2f}x" if small > 0 else "n/a"


def _print_header() -> None:
    print(
        f"{'calls':>10} {'traj':>8} {'MiB file':>8} {'wall s':>7} {'cpu s':>7} {'calls/s':>8} "
        f"{'rss peak':>9} {'rss delta':>9} {'tracemalloc':>11}"
    )


def _print_row(row: Row) -> None:
    t = row.timing
    traced = "skipped" if row.traced_peak_mib is None else f"{row.traced_peak_mib:.2f}"
    print(
        f"{t['calls']:>10,} {t['trajectories']:>8,} {row.gen.bytes / 2**20:>8.1f} {t['seconds']:>7.2f} "
        f"{t['cpu_seconds']:>7.2f} {row.rate:>8,.0f} {t['rss_peak_mib']:>9.1f} {t['rss_delta_mib']:>9.1f} "
        f"{traced:>11}",
        flush=True,
    )


def _print_figures(row: Row) -> None:
    fig = row.timing["figures"]
    gen = row.gen
    print(f"\nmix at {gen.calls:,} calls ({gen.calls / gen.trajectories:.2f} calls per trajectory):")
    print("  generated: " + ", ".join(f"{k} {v:,}" for k, v in sorted(gen.mix.items())))
    print("  scored:    " + ", ".join(f"{f} {n:,}/{d:,}" for f, (n, d) in fig["ratios"].items()))
    print("  outcomes:  " + ", ".join(f"{k} {v:,}" for k, v in sorted(fig["outcomes"].items())))
    print("  failures:  " + ", ".join(f"{k} {v:,}" for k, v in fig["failures"].items()))
    print(
        f"  confusion cells {fig['confusion_cells']}, off-diagonal {fig['off_diagonal']:,}, "
        f"dependency violations {fig['violations']:,}, error reactions {fig['reactions']:,}"
    )


def _revision() -> str:
    """The checked-out commit, so that figures can be tied to the code they measured."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def run(sizes: Sequence[int], seed: int, n_cases: int, trace: bool, repeat: int) -> list[Row]:
    suite, plans = build_suite(seed, n_cases)
    print(
        f"ToolLens scoring benchmark at {_revision()}: python {platform.python_version()}, seed {seed}, "
        f"{len(suite.toolset)} tools, {len(suite.cases)} cases, "
        f"{len(suite.toolset.dependencies)} toolset pairs; one single-threaded process per measurement"
    )
    print(f"{buildinfo.describe()} (TOOLLENS_PURE_PYTHON=1 measures the sources)")
    print(hostref.line())
    print(
        "timed: score_trajectories(suite, read_jsonl(path), keep_cases=False), JSON parsing included; "
        "generation not timed"
    )
    print(
        "calls/s = scored calls / wall seconds; "
        "rss: ru_maxrss of a fresh child, peak and growth over its baseline just before scoring; "
        + (
            "tracemalloc: peak of the scoring phase, in a separate untimed child"
            if trace
            else "tracemalloc: skipped (--no-trace)"
        )
    )
    print(f"timing: best of {repeat} runs\n" if repeat > 1 else "")
    _print_header()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="toollens-bench-") as tmp:
        for size in sizes:
            path = Path(tmp) / f"traj-{size}.jsonl"
            with path.open("w", encoding="utf-8") as out:
                gen = Generator(suite, plans, seed + size).write(out, size)
            runs = [_run_child(path, seed, n_cases, trace=False) for _ in range(repeat)]
            timing = min(runs, key=lambda r: float(r["seconds"]))
            traced = _run_child(path, seed, n_cases, trace=True)["traced_peak_mib"] if trace else None
            row = Row(size, gen, timing, traced)
            _print_row(row)
            rows.append(row)
            path.unlink()
    return rows


def summarize(rows: Sequence[Row]) -> None:
    if not rows:
        return
    _print_figures(rows[-1])
    small, big = rows[0], rows[-1]
    print()
    if len(rows) > 1:
        print(
            f"memory, {big.timing['calls']:,} vs {small.timing['calls']:,} calls: "
            f"rss peak {_ratio(big.timing['rss_peak_mib'], small.timing['rss_peak_mib'])}, "
            f"rss delta {_ratio(big.timing['rss_delta_mib'], small.timing['rss_delta_mib'])} "
            f"({small.timing['rss_delta_mib']:.1f} -> {big.timing['rss_delta_mib']:.1f} MiB)"
            + (
                f", tracemalloc peak {_ratio(big.traced_peak_mib, small.traced_peak_mib)}"
                if big.traced_peak_mib is not None and small.traced_peak_mib is not None
                else ""
            )
        )
    slowest = min(rows, key=lambda r: r.rate)
    verdict = "met" if slowest.rate >= TARGET_CALLS_PER_SECOND else "NOT met"
    print(
        f"throughput target {TARGET_CALLS_PER_SECOND:,} scored calls/s: {verdict} "
        f"(slowest size {slowest.rate:,.0f} calls/s wall, {slowest.cpu_rate:,.0f} per CPU second; "
        f"{slowest.rate / TARGET_CALLS_PER_SECOND:.0%} of target)"
    )


REAL_SAMPLE = "tau_bench_gpt-4o_airline_tasks00-24.json"
REAL_TOOLS = "tau_bench_tool_schemas_airline_retail.json"
REAL_CALLS = 60_000


def _replicate(source: Path, out: Path, target_calls: int) -> int:
    """Copies of the records until ``target_calls``, each copy's trials moved past the last: calls written."""
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    per_copy = sum(len(r["calls"]) for r in records)
    stride = 1 + max(int(r.get("trial", 0)) for r in records)
    copies = max(1, round(target_calls / per_copy))
    with out.open("w", encoding="utf-8") as f:
        for copy in range(copies):
            for r in records:
                f.write(json.dumps(dict(r, trial=int(r.get("trial", 0)) + copy * stride), ensure_ascii=False) + "\n")
    return copies * per_copy


@dataclass
class Variant:
    """One program timed by ``--real``: a label, its command (the files are appended) and where it runs."""

    label: str
    command: list[str]
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    cpus: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    output: bytes = b""

    def time(self, suite: Path, trajectories: Path) -> None:
        import os

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc files
        done = subprocess.run(
            [*self.command, str(suite), str(trajectories)], capture_output=True, cwd=self.cwd, env={**env, **self.env}
        )
        self.walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{self.label}: exit {done.returncode}\n{done.stderr.decode(errors='replace')}")
        self.output = done.stdout
        self.cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    @property
    def cpu(self) -> float:
        return sorted(self.cpus)[len(self.cpus) // 2]

    @property
    def wall(self) -> float:
        return sorted(self.walls)[len(self.walls) // 2]


# ``toollens score`` with the blame of failed conversations switched off (``--no-blame``): only as Python
# source, where scoring looks ``blame_of`` up at each call (compiled, the call is bound at build time)
NO_BLAME = (
    "import sys, app.core.score.scoring as s; s.blame_of = lambda *a: None; sys.argv[0] = 'toollens'; "
    "from app.entry import main; main()"
)


def _variants(against: Path | None, no_blame: bool = False) -> list[Variant]:
    """The floor, then this tree compiled (when it is) and as Python source (and without the blame), then
    the same of ``against``."""
    floor = Variant(
        "floor (bench/score_floor.py)", [sys.executable, str(Path(__file__).resolve().parent / "score_floor.py")]
    )
    out = [floor]
    trees: list[tuple[str, Path]] = [("this tree", Path(__file__).resolve().parents[1])]
    if against is not None:
        trees.append((f"{against}", against.resolve()))
    for name, tree in trees:
        command = [sys.executable, "-m", "app.entry", "score"]  # what the console script runs
        env = {"PYTHONPATH": str(tree)}
        if any((tree / "app" / "core" / "score").rglob("scoring.*.so")):
            out.append(Variant(f"{name}, compiled", command, tree, dict(env)))
        out.append(Variant(f"{name}, pure Python", command, tree, {**env, "TOOLLENS_PURE_PYTHON": "1"}))
        if no_blame:
            out.append(
                Variant(
                    f"{name}, pure Python, no blame",
                    [sys.executable, "-c", NO_BLAME, "score"],
                    tree,
                    {**env, "TOOLLENS_PURE_PYTHON": "1"},
                )
            )
    for v in out[1:]:
        v.command.append("--json")  # the files come before it: score SUITE TRAJECTORIES --json
    return out


def real(
    data: Path, repeat: int, target_calls: int = REAL_CALLS, against: Path | None = None, no_blame: bool = False
) -> None:
    """Whole `toollens score` processes on real tau-bench trajectories, and the floor (see the module docstring)."""
    sample, tools = data / REAL_SAMPLE, data / REAL_TOOLS
    if not sample.is_file() or not tools.is_file():
        raise SystemExit(f"no tau-bench sample in {data} (give --data DIR holding {REAL_SAMPLE} and {REAL_TOOLS})")
    toollens = [sys.executable, "-m", "app.cli"]
    variants = _variants(against, no_blame)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [*toollens, "convert", "--from", "tau-bench", str(sample), "--tools", str(tools), "--out", tmp],
            check=True,
            capture_output=True,
        )
        big = Path(tmp) / "big.jsonl"
        suite = Path(tmp) / "suite.yaml"
        calls = _replicate(Path(tmp) / "trajectories.jsonl", big, target_calls)
        print(f"python {platform.python_version()}; {_revision()}")
        print(hostref.line())
        print(
            f"real data: {REAL_SAMPLE} repeated to {calls:,} calls ({big.stat().st_size / 2**20:.1f} MiB); "
            f"whole processes, interleaved, medians of {repeat}"
        )
        for _ in range(repeat):
            for v in variants:
                v.time(suite, big)
        reports = {v.output for v in variants[1:] if not v.label.endswith("no blame")}
        floor = variants[0].cpu
        for v in variants:
            print(
                f"{v.label:<48} {v.wall:6.2f} s wall {v.cpu:6.2f} s CPU {calls / v.cpu:9,.0f} calls per CPU second"
                f"  {floor / v.cpu:5.0%} of the floor"
            )
        print("reports: " + ("identical" if len(reports) == 1 else f"{len(reports)} DIFFERENT reports"))
        if no_blame:
            unblamed = {v.output for v in variants if v.label.endswith("no blame")}
            print(
                "reports without the blame: "
                + ("identical" if len(unblamed) == 1 else f"{len(unblamed)} DIFFERENT reports")
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        metavar="CALLS",
        help=f"numbers of calls to score (default {' '.join(map(str, DEFAULT_SIZES))})",
    )
    parser.add_argument("--quick", action="store_true", help=f"sizes {' '.join(map(str, QUICK_SIZES))}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cases",
        type=int,
        default=N_CASES,
        help=f"cases in the suite (default {N_CASES}); more cases, fewer repeated arguments",
    )
    parser.add_argument("--repeat", type=int, default=1, help="timing runs per size; the best is shown")
    parser.add_argument("--no-trace", action="store_true", help="skip the tracemalloc pass")
    parser.add_argument("--real", action="store_true", help="score real tau-bench trajectories (whole process)")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(__file__).resolve().parents[2] / "shared" / "data",
        help="folder with the tau-bench sample (default: shared/data beside the repository)",
    )
    parser.add_argument("--against", type=Path, help="--real: also time the checkout in this folder (interleaved)")
    parser.add_argument(
        "--no-blame",
        action="store_true",
        help="--real: also time each tree as Python source with the blame switched off",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.real:
        real(args.data, repeat=args.repeat if args.repeat > 1 else 3, against=args.against, no_blame=args.no_blame)
        return 0
    if args.child is not None:
        print(json.dumps(measure(args.child, args.seed, args.cases, args.trace)))
        return 0
    if args.sizes and args.quick:
        parser.error("--sizes and --quick are exclusive")
    sizes = sorted(args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES))
    if any(s <= 0 for s in sizes) or args.repeat < 1 or args.cases < 1:
        parser.error("sizes, --cases and --repeat must be positive")
    summarize(run(sizes, args.seed, args.cases, trace=not args.no_trace, repeat=args.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
