"""How the simulated agent reads descriptions (app.agents.reading): each of
the course's four patterns moves the errors of its kind, hand-computed on
small toolsets in Spanish and English, and a sentence pasted into every
description changes nothing."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.agents.reading import BETA, DELIMITED, Clause, confusion_chance, read_toolset, terms
from app.agents.simulated import SimRates, SimulatedAgent, described_formats
from app.core.run.runner import run_case
from app.core.suites.suite import Suite, parse_suite
from app.core.suites.tools import Toolset, ToolSpec

L15, L3 = math.log(1.5), math.log(3)
ONLY_CONFUSION = SimRates(confusion=0.9, hallucinated_tool=0, schema_error=0, wrong_value=0, order=0, skip=0)


def toolset(*tools: tuple[str, str]) -> Toolset:
    return Toolset(tools=[ToolSpec(name, description) for name, description in tools])


def suite(tools: list[tuple[str, str]], cases: list[tuple[str, list[str]]], properties: Any = None) -> Suite:
    """Tools taking one string ``numero`` (unless ``properties`` says otherwise), cases ``(question, [tool, …])``."""
    props = properties or {"numero": {"type": "string"}}
    return parse_suite(
        {
            "name": "s",
            "toolset": {
                "name": "t",
                "tools": [
                    {
                        "name": n,
                        "description": d,
                        "parameters": {"type": "object", "properties": props},
                        "mock": {"response": {"ok": True}},
                    }
                    for n, d in tools
                ],
            },
            "cases": [
                {
                    "id": f"c{i}",
                    "question": q,
                    "expected_calls": [{"name": n, "arguments": {"numero": "4417"}} for n in names],
                }
                for i, (q, names) in enumerate(cases)
            ],
        }
    )


def calls(s: Suite, rates: SimRates, trials: int, seed: int = 4) -> list[list[str]]:
    agent = SimulatedAgent(s.toolset, rates=rates, seed=seed)
    return [
        [c.name for c in run_case(agent.for_case(case, t), s, case, trial=t).calls]
        for case in s.cases
        for t in range(trials)
    ]


def test_terms_fold_accents_stem_and_drop_question_words() -> None:
    assert terms("¿Cuál es el estado del envío de mi pedido?") == {"estad", "env", "pedid"}
    assert terms("What is the status of my order?") == {"stat", "order"}
    assert terms("Busca pedidos") == terms("buscar el pedido") == {"<generic>", "pedid"}  # generic verbs fold
    assert terms("Anula el cobro") & terms("anulen los cobros") == {"anul", "cobr"}
    assert terms("usa buscar_cliente", frozenset({"buscar_cliente"})) == frozenset()  # a name is a reference


@pytest.mark.parametrize(
    "tools, question, expected",
    [
        (
            (
                ("buscar_pedido", "Busca un pedido por su número."),
                ("buscar_producto", "Busca un producto por su nombre."),
                ("ver_saldo", "Muestra el saldo."),
            ),
            "¿En qué estado está mi pedido?",
            "buscar_pedido",
        ),
        (
            (
                ("get_order", "Gets an order by its number."),
                ("get_product", "Gets a product by its name."),
                ("get_balance", "Shows the balance."),
            ),
            "What is the status of my order?",
            "get_order",
        ),
    ],
)
def test_the_question_picks_the_tool_by_rare_words(tools: Any, question: str, expected: str) -> None:
    """Three tools, one word of the question ("pedido"/"order") in one tool only: ln 3 ahead of the
    other two, each weighs e^(-2 ln 3) = 1/9 against the expected tool's 1; the generic verb
    every tool has weighs ln(3/3) = 0."""
    reading = read_toolset(toolset(*tools))
    rivals = reading.rivals(question, expected)
    assert BETA == 2.0 and rivals == pytest.approx({n: 1 / 9 for n, _ in tools if n != expected})
    assert confusion_chance(rivals, 0.9) == pytest.approx(0.9 * (2 / 9) / (1 + 2 / 9))


@pytest.mark.parametrize(
    "pasted",
    [
        " Responde siempre en JSON y nunca inventa datos.",
        " NO sirve para otras consultas: usa {others}.",
        " Not for other requests: use {others}.",
    ],
)
def test_a_sentence_pasted_into_every_description_changes_nothing(pasted: str) -> None:
    tools = [
        ("buscar_pedido", "Busca un pedido por su número."),
        ("buscar_producto", "Busca un producto por su SKU."),
        ("ver_envio", "Muestra el estado del envío de un pedido."),
    ]
    names = [n for n, _ in tools]
    padded = [(n, d + pasted.format(others=", ".join(o for o in names if o != n))) for n, d in tools]
    plain, pad = read_toolset(toolset(*tools)), read_toolset(toolset(*padded))
    for question in (
        "¿Qué productos trae mi pedido 4417?",
        "¿Dónde viene el envío de mi pedido?",
        "Otras consultas: ¿tienen audífonos?",
    ):
        for expected in names:
            assert pad.rivals(question, expected) == pytest.approx(plain.rivals(question, expected))
    # and so the agent's calls, trial by trial (same seed)
    cases = [
        ("¿Qué productos trae mi pedido 4417?", ["buscar_pedido"]),
        ("¿Dónde viene el envío de mi pedido 4417?", ["ver_envio"]),
    ]
    assert calls(suite(padded, cases), ONLY_CONFUSION, 40) == calls(suite(tools, cases), ONLY_CONFUSION, 40)


@pytest.mark.parametrize(
    "tools, question",
    [
        (
            [
                ("ver_envio", "Muestra el estado de un pedido."),
                ("ver_devolucion", "Muestra el estado de un pedido devuelto. NO sirve para envíos: usa ver_envio."),
                ("buscar_producto", "Busca un producto por su nombre."),
            ],
            "¿Cuál es el estado del envío de mi pedido?",
        ),
        (
            [
                ("track_shipment", "Shows the status of an order."),
                ("track_return", "Shows the status of a returned order. Not for shipments: use track_shipment."),
                ("find_product", "Finds a product by its name."),
            ],
            "What is the status of my order shipment?",
        ),
    ],
)
def test_a_negative_delimitation_moves_the_question_to_the_named_tool(tools: Any, question: str) -> None:
    """The question's three words (estado/status, pedido/order, envío/shipment): the first two are in two of
    the three texts (ln 1.5 each), the third only in the first tool's name (ln 3: a delimitation's words are
    no content and count in no rarity). The first tool matches all three (2·L + ln 3), the second two
    (2·L), and its clause speaks of the third (worth ln 3, more than 2·L), so it moves all 2·L to the
    first: 0 against 4·L + ln 3, × (1 - 0.75) for a pair the clause tells apart. Without the clause:
    2L against 2L + ln 3, e^(-2 ln 3) = 1/9."""
    first, second, third = (n for n, _ in tools)
    reading = read_toolset(toolset(*tools))
    assert reading.scores(terms(question, frozenset(reading.names))) == pytest.approx(
        {first: 4 * L15 + L3, second: 0.0, third: 0.0}
    )
    lead = math.exp(-2 * (4 * L15 + L3))
    assert reading.rivals(question, first) == pytest.approx({second: lead * (1 - DELIMITED), third: lead})
    undelimited = [(n, d.split(". ")[0] + ".") for n, d in tools]
    assert read_toolset(toolset(*undelimited)).rivals(question, first)[second] == pytest.approx(1 / 9)


def test_delimitation_forms_and_how_clearly_a_clause_tells_a_pair_apart() -> None:
    reading = read_toolset(
        toolset(
            ("buscar_pedido", "Busca un pedido. NO sirve para buscar clientes: para eso usa `buscar_cliente`."),
            ("buscar_cliente", "Busca un cliente. ¿Un producto? Para eso usa buscar_producto o ver_stock."),
            ("cancelar_pedido", "Cancela un pedido; si ya está despachado, usa iniciar_devolucion."),
            (
                "buscar_producto",
                "Finds a product. Use buscar_pedido, buscar_cliente, cancelar_pedido, ver_stock or "
                "iniciar_devolucion instead.",
            ),
            ("ver_stock", "Shows the stock. Not for prices: use buscar_producto."),
            ("iniciar_devolucion", "Inicia una devolución."),
        )
    )
    assert reading.clauses["buscar_pedido"] == (Clause(frozenset({"<generic>", "clien"}), ("buscar_cliente",)),)
    assert reading.clauses["cancelar_pedido"] == (Clause(frozenset({"desp"}), ("iniciar_devolucion",)),)
    assert reading.clauses["ver_stock"] == (Clause(frozenset({"pric"}), ("buscar_producto",)),)
    assert reading.content["cancelar_pedido"] == {"canc", "pedid"}  # the redirect is no content
    # five others: a clause naming one tells the pair apart fully, two 3/4, all five not at all
    assert (
        reading.delimited("buscar_pedido", "buscar_cliente")
        == reading.delimited("buscar_cliente", "buscar_pedido")
        == 1.0
    )
    assert reading.delimited("buscar_cliente", "ver_stock") == 0.75
    assert reading.delimited("buscar_producto", "iniciar_devolucion") == 0.0
    assert reading.delimited("buscar_pedido", "iniciar_devolucion") == 0.0


def test_course_table_row_1_a_described_tool_is_not_confused() -> None:
    """ "Busca información." beside two other "Busca información…" tools: only the name's "pedido"
    (ln 3) sets it apart, each rival weighs 1/9. The course's rewrite matches estado, pedido and the
    value PED-12345 (of the shape of the format it writes; a value's letters are no word): 3·ln 3, and
    names buscar_cliente: rivals weigh 3^-6 and 3^-6/4."""
    others = [("buscar_cliente", "Busca información del cliente."), ("buscar_producto", "Busca información por texto.")]
    good = (
        "Busca un pedido por su número (formato PED-12345). Devuelve estado, fecha de despacho y monto. "
        "NO sirve para buscar clientes: para eso usa `buscar_cliente`."
    )
    question = "¿En qué estado está mi pedido PED-12345?"
    chances = {}
    for label, description in (("poor", "Busca información."), ("good", good)):
        reading = read_toolset(toolset(("buscar_pedido", description), *others))
        chances[label] = confusion_chance(reading.rivals(question, "buscar_pedido"), 0.9)
    w = 1.25 / 3**6
    assert chances == pytest.approx({"poor": 0.9 * (2 / 9) / (11 / 9), "good": 0.9 * w / (1 + w)})
    confused = {}
    for label, description in (("poor", "Busca información."), ("good", good)):
        s = suite([("buscar_pedido", description), *others], [(question, ["buscar_pedido"])])
        confused[label] = sum(c != ["buscar_pedido"] for c in calls(s, ONLY_CONFUSION, 300))
    assert confused == {"poor": 47, "good": 1}  # seed 4, 300 trials: 16.4% and 0.15% expected


@pytest.mark.parametrize(
    "first, poor, good, question",
    [
        (
            "buscar_cliente",
            "Obtiene el saldo del cliente.",
            "Devuelve el saldo en pesos. Requiere el id interno (entero), no el RUT. Obtén el id con `buscar_cliente` "
            "primero.",
            "Mi RUT es 12345678-9, ¿cuál es mi saldo?",
        ),
        (
            "find_customer",
            "Gets the customer's balance.",
            "Returns the balance in dollars. Requires the internal id (integer), not the email. Get the id with "
            "`find_customer` first.",
            "My email is ana@example.com, what is my balance?",
        ),
    ],
)
def test_course_table_row_2_type_and_precondition_cut_type_and_order_errors(
    first: str, poor: str, good: str, question: str
) -> None:
    """ "Obtiene el saldo del cliente." vs the course's rewrite: the id's type is stated (type errors
    halve) and "Obtén el id con buscar_cliente primero" halves the chance the two steps are swapped."""
    swapped = {}
    for label, description in (("poor", poor), ("good", good)):
        s = suite(
            [(first, "Busca un cliente por su RUT."), ("ver_saldo", description)],
            [(question, [first, "ver_saldo"])],
            properties={"numero": {"type": "string"}, "id": {"type": "integer"}},
        )
        assert (("ver_saldo", "id") in described_formats(s.toolset)) == (label == "good")
        only_order = SimRates(confusion=0, hallucinated_tool=0, schema_error=0, wrong_value=0, order=1, skip=0)
        swapped[label] = sum(c[0] == "ver_saldo" for c in calls(s, only_order, 200))
    assert swapped == {"poor": 200, "good": 96}  # every trial, then half of them (seed 4)


def test_course_table_row_3_consequences_send_the_question_to_the_right_tool() -> None:
    """ "Cancela una operación." matches "cancelar" (ln 3) beside iniciar_devolucion: it weighs e^(2 ln 3)
    = 9 for a shipped order. The rewrite's "si ya está despachado, usa iniciar_devolucion" moves
    "despachado" (ln 3, only in that clause) to iniciar_devolucion: 1/9, × 1/4 for the named pair."""
    rest = [
        ("iniciar_devolucion", "Inicia la devolución de un pedido."),
        ("buscar_producto", "Busca un producto por su nombre."),
    ]
    question = "Mi pedido ya fue despachado y quiero cancelarlo."
    poor = read_toolset(toolset(("cancelar_pedido", "Cancela una operación sobre un pedido."), *rest))
    good = read_toolset(
        toolset(
            (
                "cancelar_pedido",
                "Cancela un pedido. Irreversible. Solo si el estado es "
                "`pendiente`; si ya está `despachado`, usa `iniciar_devolucion`.",
            ),
            *rest,
        )
    )
    assert poor.rivals(question, "iniciar_devolucion")["cancelar_pedido"] == pytest.approx(9.0)
    assert good.rivals(question, "iniciar_devolucion")["cancelar_pedido"] == pytest.approx(1 / 36)


def test_course_table_row_4_a_stated_date_format_halves_type_errors() -> None:
    for field_description, stated in (
        ("Fecha del evento.", False),
        ("Fecha en formato YYYY-MM-DD. Si el usuario dice 'el martes pasado', calcúlala tú antes de llamar.", True),
    ):
        ts = Toolset(
            tools=[
                ToolSpec(
                    "agendar",
                    "Agenda una visita.",
                    {
                        "type": "object",
                        "properties": {"fecha": {"type": "string", "format": "date", "description": field_description}},
                    },
                )
            ]
        )
        assert (("agendar", "fecha") in described_formats(ts)) == stated


def test_the_case_s_other_steps_are_no_rivals_and_keep_their_words() -> None:
    """A question asking for two steps: at the first step, the second step's tool is no rival, and
    its words the first tool lacks ("saldo", "cuenta") are left to it: ver_cuenta, which reads like
    ver_saldo, gains nothing from "cuenta" at the step that looks the customer up."""
    reading = read_toolset(
        toolset(
            ("buscar_cliente", "Busca un cliente por su RUT."),
            ("ver_saldo", "Muestra el saldo de la cuenta."),
            ("ver_cuenta", "Muestra los datos de la cuenta."),
        )
    )
    question = "Mi RUT es 12345678-9: ¿cuál es el saldo de mi cuenta?"
    both = frozenset({"buscar_cliente", "ver_saldo"})
    # rut (ln 3) for buscar_cliente, nothing left for ver_cuenta: e^(-2 ln 3)
    assert reading.rivals(question, "buscar_cliente", both) == pytest.approx({"ver_cuenta": 1 / 9})
    assert reading.rivals(question, "buscar_cliente")["ver_cuenta"] == pytest.approx(math.exp(-2 * (L3 - L15)))


def test_the_agent_is_deterministic_per_seed() -> None:
    s = suite(
        [("buscar_pedido", "Busca información."), ("buscar_producto", "Busca información por texto.")],
        [("¿Qué trae mi pedido 4417?", ["buscar_pedido"])],
    )
    assert calls(s, SimRates(), 30, seed=9) == calls(s, SimRates(), 30, seed=9)
    assert calls(s, SimRates(), 30, seed=9) != calls(s, SimRates(), 30, seed=10)


def test_issue_probe_delimiting_look_alike_pairs_cuts_confusions_and_pasting_changes_nothing() -> None:
    """bench/sim_probe.py's shop suite (three look-alike pairs), confusion=0.9, seed 4, 60 trials of each
    of its 6 cases. The Jaccard model this replaces gave 101, 112 (worse) and 101."""
    from bench.sim_probe import confusions, shop_suite

    rates = SimRates(confusion=0.9)
    found = {v: confusions(shop_suite(v), rates, 4, 60) for v in ("base", "pairs", "everywhere")}
    assert found == {"base": 41, "pairs": 30, "everywhere": 41}


def _lookup_suite(lang: str, *, conversation: bool = False) -> Suite:
    es = lang == "es"
    tool = {
        "name": "buscar_pedido" if es else "get_order",
        "description": "Busca un pedido por su número." if es else "Gets an order by its number.",
        "parameters": {"type": "object", "properties": {"numero": {"type": "string"}}},
        "mock": {"response": {"estado" if es else "status": "despachado" if es else "shipped"}},
    }
    call = {"name": tool["name"], "arguments": {"numero": "PED-4417"}}
    case: dict[str, Any] = {"id": "c", "expected_calls": [call]}
    if conversation:
        case["question"] = "Hola, ¿cómo va mi pedido?" if es else "Hi, how is my order doing?"
        case["user"] = {
            "instruction": "Eres Ana y quieres saber de tu pedido."
            if es
            else "You are Ana and you want news of your order.",
            "known": {"numero": "PED-4417"},
        }
    else:
        case["question"] = "¿Cómo va mi pedido PED-4417?" if es else "How is my order PED-4417 doing?"
    greeting = {"id": "none", "question": "¿Hola, qué tal?" if es else "Hello, how are you?"}
    return parse_suite({"name": "s", "toolset": {"name": "t", "tools": [tool]}, "cases": [case, greeting]})


@pytest.mark.parametrize(
    "lang, found, none",
    [
        (
            "es",
            "Esto es lo que encontré: estado despachado.",
            "No hace falta consultar herramientas para responder esto.",
        ),
        ("en", "Here is what I found: status shipped.", "I do not need any tool to answer this."),
    ],
)
def test_the_agent_answers_in_the_suite_s_language(lang: str, found: str, none: str) -> None:
    s = _lookup_suite(lang)
    agent = SimulatedAgent(
        s.toolset, rates=SimRates(confusion=0, hallucinated_tool=0, schema_error=0, wrong_value=0, order=0, skip=0)
    )
    answers = [run_case(agent.for_case(c, 0), s, c).answer for c in s.cases]
    assert answers == [found, none]


@pytest.mark.parametrize(
    "lang, ask, reply",
    [
        ("es", "Para ayudarte necesito tu numero (para buscar_pedido). ¿Me lo indicas?", "Mi numero es PED-4417."),
        ("en", "To help you I need your numero (for get_order). Could you tell me?", "My numero is PED-4417."),
    ],
)
def test_in_a_conversation_it_asks_in_the_user_s_language(lang: str, ask: str, reply: str) -> None:
    from app.agents.users import RuleUser

    s = _lookup_suite(lang, conversation=True)
    agent = SimulatedAgent(
        s.toolset, rates=SimRates(confusion=0, hallucinated_tool=0, schema_error=0, wrong_value=0, order=0, skip=0)
    )
    trajectory = run_case(agent.for_case(s.cases[0], 0), s, s.cases[0], user=RuleUser())
    said = [m.content for m in trajectory.messages]
    assert said[1:3] == [ask, reply] and [c.name for c in trajectory.calls] == [s.toolset.tools[0].name]


def test_course_table_row_3_in_english() -> None:
    """The same rewrite in English: "if it was already shipped, use start_return" speaks of three words of
    the question (was, already, shipped: ln 3 each, only in that clause), more than cancel_order's whole match
    (cancel ln 3 + order ln 1.5), which all moves to start_return: 0 against 2·ln 1.5 + ln 3, × 1/4."""
    rest = [("start_return", "Starts the return of an order."), ("find_product", "Finds a product by its name.")]
    question = "My order was already shipped and I want to cancel it."
    poor = read_toolset(toolset(("cancel_order", "Cancels an operation on an order."), *rest))
    good = read_toolset(
        toolset(
            (
                "cancel_order",
                "Cancels an order. Irreversible. Only if its status is `pending`; "
                "if it was already shipped, use `start_return`.",
            ),
            *rest,
        )
    )
    assert poor.rivals(question, "start_return")["cancel_order"] == pytest.approx(9.0)
    assert good.rivals(question, "start_return")["cancel_order"] == pytest.approx(
        math.exp(-2 * (2 * L15 + L3)) * (1 - DELIMITED)
    )


def test_a_value_written_in_a_negated_clause_is_no_format_of_its_tool() -> None:
    """ "NO sirve para buscar ticket (formato "TK-34946"): usa buscar_ticket." speaks of buscar_ticket's
    identifier: a question with a TK number gains buscar_empleado nothing; the same value written
    affirmatively is the tool's format."""
    legajo = {"type": "object", "properties": {"legajo": {"type": "string"}}}
    negated = Toolset.from_list(
        [
            {
                "name": "buscar_empleado",
                "description": "Busca un empleado. NO sirve para buscar ticket (formato "
                '"TK-34946"): usa buscar_ticket.',
                "parameters": legajo,
            },
            {"name": "buscar_ticket", "description": "Busca un ticket.", "parameters": legajo},
            {"name": "ver_estado", "description": "Muestra un estado.", "parameters": legajo},
        ]
    )
    reading = read_toolset(negated)
    assert "<shape:aa-99999>" not in reading.content["buscar_empleado"]
    affirmed = read_toolset(
        Toolset.from_list(
            [
                {
                    "name": "buscar_empleado",
                    "description": 'Busca un empleado (formato "TK-34946").',
                    "parameters": legajo,
                },
                *(t.document() for t in negated.tools[1:]),
            ]
        )
    )
    assert "<shape:aa-99999>" in affirmed.content["buscar_empleado"]


def test_a_value_that_fits_another_steps_format_is_that_steps_shape_too() -> None:
    """A RUT given for buscar_cliente, in a question that also needs verificar_compra: a delimitation on
    verificar_compra naming the RUT's shape does not move verificar_compra's score at its own step."""
    rut = {"type": "object", "properties": {"rut": {"type": "string", "pattern": r"^\d{7,8}-[\dkK]$"}}}
    pedido = {"type": "object", "properties": {"numero": {"type": "string", "pattern": r"^PED-\d{5}$"}}}
    tools = Toolset.from_list(
        [
            {"name": "buscar_cliente", "description": "Busca un cliente.", "parameters": rut},
            {
                "name": "verificar_compra",
                "parameters": pedido,
                "description": "Verifica la compra de un pedido. "
                'NO sirve para buscar cliente por RUT (formato "12345678-9"): '
                "usa buscar_cliente.",
            },
            {"name": "buscar_pedido", "description": "Busca un pedido.", "parameters": pedido},
        ]
    )
    reading = read_toolset(tools)
    question = "Mi RUT es 12345678-9. ¿El pedido PED-33107 está a mi nombre?"
    steps = frozenset({"buscar_cliente", "verificar_compra"})
    # verificar_compra and buscar_pedido match the order number alike: one rival of weight 1, nothing moved
    assert reading.rivals(question, "verificar_compra", steps) == pytest.approx({"buscar_pedido": 1.0})
