"""`toollens fix` on a small Spanish shop none of its templates were written
on (seven tools, look-alike lookups): each delimitation names its partner and
ONE fact from the tools that tells them apart (RUT vs SKU vs order number,
reads vs writes), accents kept, never a pasted description; invented tools
map to what their name means; proposals that explain nothing are advice."""

from __future__ import annotations

from pathlib import Path

from app.core.advise.fix import CallFact, TrajectoryFact, for_pairs, pair_proposals, propose
from app.core.advise.fix_words import effect, meaning_match, spelled
from app.core.suites.tools import Toolset


def _obj(props: dict[str, dict[str, object]], required: list[str]) -> dict[str, object]:
    return {"type": "object", "properties": props, "required": required}


RUT = {"type": "string", "pattern": r"^\d{7,8}-[\dkK]$"}
PEDIDO = {"type": "string", "pattern": r"^PED-\d{5}$"}
SHOP = Toolset.from_list(
    [
        {
            "name": "buscar_cliente",
            "description": "Busca un cliente por su RUT chileno (formato 12345678-9, sin puntos, "
            "con guion) y devuelve su id interno.",
            "parameters": _obj({"rut": RUT}, ["rut"]),
        },
        {
            "name": "buscar_pedido",
            "description": "Busca un pedido por su numero (formato PED-12345).",
            "parameters": _obj({"numero": PEDIDO}, ["numero"]),
        },
        {
            "name": "buscar_producto",
            "description": "Busca un producto por su SKU.",
            "parameters": _obj({"sku": {"type": "string"}}, ["sku"]),
        },
        {
            "name": "ver_saldo",
            "description": "Muestra el saldo disponible de un cliente a partir de su id.",
            "parameters": _obj({"id": {"type": "integer"}}, ["id"]),
        },
        {
            "name": "emitir_nota_credito",
            "description": "Emite una nota de crédito a favor del cliente por un monto.",
            "parameters": _obj({"id": {"type": "integer"}, "monto": {"type": "integer"}}, ["id", "monto"]),
        },
        {
            "name": "verificar_compra",
            "description": "Comprueba que el cliente hizo la compra del pedido indicado.",
            "parameters": _obj({"id": {"type": "integer"}, "numero": PEDIDO}, ["id", "numero"]),
        },
        {
            "name": "iniciar_devolucion",
            "description": "Inicia la devolución de un pedido entregado.",
            "parameters": _obj({"numero": PEDIDO, "motivo": {"type": "string"}}, ["numero", "motivo"]),
        },
    ]
)
EXAMPLES = {
    ("buscar_cliente", "rut"): "12345678-9",
    ("buscar_pedido", "numero"): "PED-12345",
    ("verificar_compra", "numero"): "PED-12345",
    ("iniciar_devolucion", "numero"): "PED-12345",
}


def wrong(key: str, expected: str, called: str) -> TrajectoryFact:
    return TrajectoryFact(
        key=key,
        case_id=key.split("#")[0],
        question=f"q {key}",
        passed=False,
        failures=("selection",),
        calls=(CallFact(called, {}, expected=expected),),
        cause=("wrong_tool", expected, called),
    )


def tails(cells: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    got = propose(SHOP, [wrong(f"c{i}#0", e, c) for i, (e, c) in enumerate(cells)], examples=EXAMPLES)
    return {(p.tool or "", p.partner or ""): p.tail for p in got if p.pattern == "negative_delimitation"}


def test_each_delimitation_names_the_partner_and_the_one_fact_that_tells_them_apart() -> None:
    got = tails(
        [
            ("buscar_cliente", "buscar_pedido"),
            ("buscar_pedido", "buscar_producto"),
            ("buscar_producto", "buscar_cliente"),
            ("buscar_cliente", "emitir_nota_credito"),
            ("emitir_nota_credito", "ver_saldo"),
            ("ver_saldo", "emitir_nota_credito"),
            ("iniciar_devolucion", "buscar_pedido"),
        ]
    )
    assert got == {
        # the argument the partner goes by and the tool lacks, as its description spells it, with its format
        ("buscar_pedido", "buscar_cliente"): 'NO sirve para buscar cliente por RUT (formato "12345678-9"): usa '
        "buscar_cliente.",
        ("buscar_producto", "buscar_pedido"): 'NO sirve para buscar pedido por numero (formato "PED-12345"): usa '
        "buscar_pedido.",
        # SKU has no pattern: both read, so the argument alone tells them apart
        ("buscar_cliente", "buscar_producto"): "NO sirve para buscar producto por SKU: usa buscar_producto.",
        ("emitir_nota_credito", "buscar_cliente"): 'NO sirve para buscar cliente por RUT (formato "12345678-9"): '
        "usa buscar_cliente.",
        # reads vs writes, and the object as the description phrases it: "nota de crédito", accent kept
        ("ver_saldo", "emitir_nota_credito"): "NO sirve para emitir nota de crédito (esa hace cambios): usa "
        "emitir_nota_credito.",
        ("emitir_nota_credito", "ver_saldo"): "NO sirve para ver saldo (esa solo consulta): usa ver_saldo.",
        # it takes buscar_pedido's numero too: what tells them apart is what each does
        ("buscar_pedido", "iniciar_devolucion"): "NO sirve para iniciar devolución (esa hace cambios): usa "
        "iniciar_devolucion.",
    }
    for (_tool, partner), text in got.items():  # never a pasted or cut description
        assert "…" not in text and SHOP.get(partner).description.rstrip(".") not in text  # type: ignore[union-attr]


def test_descriptions_that_say_what_they_are_get_no_distinct_names_filler() -> None:
    cells = [
        ("buscar_cliente", "buscar_pedido"),
        ("buscar_pedido", "buscar_producto"),
        ("ver_saldo", "emitir_nota_credito"),
        ("verificar_compra", "buscar_pedido"),
    ]
    got = propose(SHOP, [wrong(f"c{i}#0", e, c) for i, (e, c) in enumerate(cells)], examples=EXAMPLES)
    assert [p for p in got if p.pattern == "distinct_names"] == []
    # one that never says what it goes by gets its name's words as the toolset spells them, and that argument
    # (numero is what buscar_pedido takes alone: a pedido's)
    vague = Toolset.from_list(
        [
            {**t.document(), "description": "Gestiona una devolución."}
            if t.name == "iniciar_devolucion"
            else t.document()
            for t in SHOP.tools
        ]
    )
    leads = [
        p.lead
        for p in propose(vague, [wrong("d#0", "buscar_pedido", "iniciar_devolucion")], examples=EXAMPLES)
        if p.pattern == "distinct_names"
    ]
    assert leads == ['Iniciar devolución (por numero de pedido, formato "PED-12345").']


def test_an_invented_tool_maps_to_the_tool_its_name_means_or_to_none() -> None:
    assert meaning_match("lookup_order", SHOP) == "buscar_pedido"  # an order lookup, not the step expected
    assert meaning_match("get_balance", SHOP) == "ver_saldo"
    assert meaning_match("obtener_cliente", SHOP) == "buscar_cliente"
    assert meaning_match("get_product", SHOP) == "buscar_producto"
    assert meaning_match("cancelar_pedido", SHOP) is None  # cancelling is no lookup, and nothing here cancels
    assert meaning_match("send_email", SHOP) is None
    call = CallFact("lookup_order", {}, exists=False, expected="emitir_nota_credito")
    (p,) = propose(
        SHOP,
        [
            TrajectoryFact(
                "h#0", "h", "q", False, ("hallucinated_tool",), (call,), cause=("hallucinated_tool", "lookup_order", "")
            )
        ],
    )
    assert p.tail.startswith("La herramienta lookup_order no existe: para eso usa buscar_pedido. ")
    assert p.explains == 1 and not p.advice


def test_what_tells_tools_apart_is_read_from_the_tools() -> None:
    assert [effect(t, SHOP) for t in SHOP.tools] == ["reads", "reads", "reads", "reads", "writes", "reads", "writes"]
    assert spelled(["emitir", "nota", "credito"], SHOP) == "emitir nota de crédito"
    assert spelled(["iniciar", "devolucion"], SHOP) == "iniciar devolución"


def test_a_proposal_whose_evidence_sank_on_something_else_is_advice_with_one_count() -> None:
    order = CallFact("emitir_nota_credito", {"id": 1, "monto": 5}, dependency_before="verificar_compra")
    picked = CallFact("ver_saldo", {}, expected="buscar_cliente")
    sunk_elsewhere = [
        TrajectoryFact(
            f"n{i}#0",
            f"n{i}",
            "q",
            False,
            ("selection", "dependency"),
            (picked, order),
            cause=("wrong_tool", "buscar_cliente", "ver_saldo"),
        )
        for i in range(4)
    ]
    got = {p.pattern: p for p in propose(SHOP, sunk_elsewhere, examples=EXAMPLES)}
    pre = got["precondition"]
    assert pre.advice and pre.explains == 0 and pre.to_dict()["advice"] is True
    assert pre.evidence == ["emitir_nota_credito called before verificar_compra (declared pair)"]  # no other count
    neg = got["negative_delimitation"]
    assert neg.explains == 4 and not neg.advice
    assert [p.pattern for p in propose(SHOP, sunk_elsewhere)][-1] == "precondition"  # ranked after what explains


def test_the_run_page_and_the_command_build_the_same_text_for_a_pair() -> None:
    cells = [
        ("buscar_cliente", "buscar_pedido"),
        ("buscar_pedido", "buscar_cliente"),
        ("buscar_pedido", "verificar_compra"),
    ]
    trajectories = [wrong(f"c{i}#0", e, c) for i, (e, c) in enumerate(cells)]
    vague = Toolset.from_list(
        [
            {**t.document(), "description": "Busca información."} if t.name.startswith("buscar") else t.document()
            for t in SHOP.tools
        ]
    )
    cli = propose(vague, trajectories, examples=EXAMPLES)
    page = pair_proposals(vague, {c: 1 for c in cells}, examples=EXAMPLES)
    for pair in [("buscar_cliente", "buscar_pedido"), ("buscar_pedido", "verificar_compra")]:
        a = sorted((p.tool, p.pattern, p.after) for p in for_pairs(cli, [pair]))
        b = sorted((p.tool, p.pattern, p.after) for p in for_pairs(page, [pair]))
        assert a == b and a


def test_a_value_the_schema_let_through_is_no_example_of_the_format() -> None:
    dated = Toolset.from_list(
        [
            *(t.document() for t in SHOP.tools if t.name != "iniciar_devolucion"),
            {
                "name": "iniciar_devolucion",
                "description": "Inicia la devolución de un pedido entregado.",
                "parameters": _obj(
                    {"numero": PEDIDO, "fecha_retiro": {"type": "string", "format": "date"}}, ["numero", "fecha_retiro"]
                ),
            },
        ]
    )
    call = CallFact(
        "iniciar_devolucion",
        {"numero": "PED-12345", "fecha_retiro": 20240312},
        expected="iniciar_devolucion",
        schema_field="fecha_retiro",
        schema_message="expected string",
    )
    got = propose(
        dated,
        [TrajectoryFact("d#0", "d", "q", False, ("schema",), (call,))],
        examples={
            ("iniciar_devolucion", "fecha_retiro"): "12 de marzo de 2024",
            ("iniciar_devolucion", "numero"): "PED-12345",
        },
    )
    assert [p.tail for p in got if p.pattern == "argument_format"] == [
        "fecha_retiro: texto, formato AAAA-MM-DD, no 20240312."
    ]


def test_the_demos_invented_names_map_to_what_they_mean_in_its_toolset() -> None:
    from pathlib import Path

    import yaml

    demo = Toolset.from_list(
        yaml.safe_load(
            (Path(__file__).resolve().parents[2] / "examples" / "toolset_v1.yaml").read_text(encoding="utf-8")
        )["tools"]
    )
    assert {
        n: meaning_match(n, demo)
        for n in ("get_balance", "lookup_order", "obtener_cliente", "consultar_cuenta", "cancelar_pedido")
    } == {
        "get_balance": "ver_saldo",
        "lookup_order": "buscar_pedido",
        "obtener_cliente": "buscar_cliente",
        "consultar_cuenta": None,
        "cancelar_pedido": None,
    }


def test_who_judged_names_the_agent_and_with_the_stand_in_the_commands_for_a_real_model() -> None:
    from pathlib import Path

    from app.commands.fix_verify import who_judged

    real = {"agent": "openai", "model": "gpt-4o-mini", "base_url": "http://localhost:8000/v1", "trials": 3}
    said, commands = who_judged(real, "tienda", "tienda-fix-1", candidate_file=None)
    assert (
        said
        == (
            "judged by: agent openai, model gpt-4o-mini at http://localhost:8000/v1, the same on both sides "
            "(tienda and tienda-fix-1)"
        )
        and commands == []
    )
    sim = {"agent": "simulated", "seed": 1, "sim_rates": "confusion=0.9", "trials": 60, "faults": None}
    said, commands = who_judged(sim, "tienda", "tienda-fix-1", candidate_file=Path("cand.yaml"))
    assert said.startswith(
        "judged by: the simulated agent (seed 1, rates confusion=0.9) on both sides (tienda and "
        "tienda-fix-1): a model of a model"
    )
    assert commands == [
        "toollens run SUITE.yaml --agent openai --model MODEL --base-url URL --trials 60 --run tienda-real"
        "  # SUITE.yaml: the suite tienda ran",
        "toollens run cand.yaml --agent openai --model MODEL --base-url URL --trials 60 --run tienda-fix-1-real",
        "toollens gate --baseline tienda-real --candidate tienda-fix-1-real",
    ]


def test_a_format_proposal_quotes_attempts_at_the_pattern_not_the_questions_words() -> None:
    calls = [
        CallFact(
            "iniciar_devolucion",
            {"numero": sent, "motivo": "falla"},
            expected="iniciar_devolucion",
            schema_field="numero",
            schema_message="does not match pattern",
        )
        for sent in ("cargador USB-C 65W", "12345", "ped 12345")
    ]
    got = propose(
        SHOP,
        [TrajectoryFact(f"f{i}#0", f"f{i}", "q", False, ("schema",), (c,)) for i, c in enumerate(calls)],
        examples=EXAMPLES,
    )
    # a product's name sent as the order number would put the question's words into the description
    assert [p.tail for p in got if p.pattern == "argument_format"] == [
        'numero: texto, formato "PED-12345", no "12345" o "ped 12345".'
    ]


def test_lint_flags_the_shop_s_look_alike_lookups_before_any_run() -> None:
    """Issue 44: "Busca un pedido por su numero (formato PED-12345)." / "Busca un producto por su SKU." read
    alike at 0.10 by their words, but are one sentence with two slots, as is "Busca un cliente por su RUT
    chileno …": lint names the three pairs without a run; a delimitation naming the partner clears one."""
    from app.core.advise.lint import lint_toolset

    found = [f for f in lint_toolset(SHOP) if f.rule == "lookalike_pair"]
    assert [(f.tool, f.related, f.detail["shape"]) for f in found] == [
        ("buscar_cliente", ("buscar_pedido",), "busca un X por su X"),
        ("buscar_cliente", ("buscar_producto",), "busca un X por su X"),
        ("buscar_pedido", ("buscar_producto",), "busca un X por su X"),
    ]
    delimited = Toolset.from_list(
        [
            {
                "name": t.name,
                "description": t.description
                + (" NO sirve para buscar productos: usa buscar_producto." if t.name == "buscar_pedido" else ""),
                "parameters": t.parameters,
            }
            for t in SHOP.tools
        ]
    )
    assert [(f.tool, f.related) for f in lint_toolset(delimited) if f.rule == "lookalike_pair"] == [
        ("buscar_cliente", ("buscar_pedido",)),
        ("buscar_cliente", ("buscar_producto",)),
    ]


# an English shop of the shape the generated suites have (tests/generated_suites.py): look-alike names that
# differ in one word, descriptions of one shape
def _en(name: str, description: str, arg: str, pattern: str | None = None) -> dict[str, object]:
    prop: dict[str, object] = {"type": "string", **({"pattern": pattern} if pattern else {})}
    return {"name": name, "description": description, "parameters": _obj({arg: prop}, [arg])}


EN = Toolset.from_list(
    [
        _en("find_ticket", "Finds a ticket by its ticket number.", "ticket_id", r"^TK-\d{5}$"),
        _en("cancel_ticket", "Cancels a ticket given its ticket number.", "ticket_id", r"^TK-\d{5}$"),
        _en("get_status_customer", "Shows where a customer stands, given its customer code.", "customer_code"),
        _en("list_history_customer", "Lists the history of a customer by its customer code.", "customer_code"),
        _en("find_card", "Finds a card by its last four digits.", "last_digits", r"^\d{4}$"),
    ]
)
EN_EXAMPLES = {("find_ticket", "ticket_id"): "TK-77120", ("find_card", "last_digits"): "4821"}


def test_english_delimitations_read_as_english_with_the_one_fact_that_tells_the_pair_apart() -> None:
    cells = [
        ("find_ticket", "cancel_ticket"),
        ("cancel_ticket", "find_ticket"),
        ("get_status_customer", "list_history_customer"),
        ("find_card", "find_ticket"),
    ]
    got = propose(EN, [wrong(f"c{i}#0", e, c) for i, (e, c) in enumerate(cells)], examples=EN_EXAMPLES)
    assert {(p.tool, p.partner): p.tail for p in got if p.pattern == "negative_delimitation"} == {
        # the verb as "-ing", the object with the article the descriptions write, what each does
        ("cancel_ticket", "find_ticket"): "NOT for finding a ticket (that one only reads): use find_ticket.",
        ("find_ticket", "cancel_ticket"): "NOT for cancelling a ticket (that one makes changes): use cancel_ticket.",
        # "status customer" is no phrase any description writes: "the status of a customer"
        ("list_history_customer", "get_status_customer"): "NOT for getting the status of a customer: use "
        "get_status_customer.",
        # the argument the partner goes by and the tool lacks, with its format from a valid call
        ("find_ticket", "find_card"): 'NOT for finding a card by last_digits (format "4821"): use find_card.',
    }
    # a lead says what a tool is in English too, and only where its description does not
    leads = {p.tool: p.lead for p in got if p.pattern == "distinct_names"}
    assert leads == {"get_status_customer": "Get the status of a customer."}


def test_an_english_invented_name_maps_to_what_it_means_or_to_none() -> None:
    assert meaning_match("lookup_ticket", EN) == "find_ticket"
    assert meaning_match("get_customer_history", EN) in ("list_history_customer", None)  # never the expected step
    assert meaning_match("send_email", EN) is None
    call = CallFact("send_email", {}, exists=False, expected="cancel_ticket")
    (p,) = propose(
        EN,
        [
            TrajectoryFact(
                "h#0", "h", "q", False, ("hallucinated_tool",), (call,), cause=("hallucinated_tool", "send_email", "")
            )
        ],
    )
    assert p.tail.startswith("There is no tool named send_email. Call only the declared tools: ")
    assert "cancel_ticket for that" not in p.tail  # the step that was expected is not what the name means


def test_accents_are_kept_where_no_text_writes_the_word_and_spelling_is_kept_where_one_does() -> None:
    bare = Toolset.from_list(
        [
            {
                "name": "iniciar_devolucion",
                "description": "Gestiona una operación.",
                "parameters": _obj({"numero": PEDIDO}, ["numero"]),
            },
            {
                "name": "emitir_nota_credito",
                "description": "Gestiona un abono.",
                "parameters": _obj({"id": {"type": "integer"}}, ["id"]),
            },
            {
                "name": "ver_estado_envio",
                "description": "Consulta cómo va un envío.",
                "parameters": _obj({"seguimiento": {"type": "string"}}, ["seguimiento"]),
            },
        ]
    )
    assert spelled(["iniciar", "devolucion"], bare) == "iniciar devolución"
    assert spelled(["emitir", "nota", "credito"], bare) == "emitir nota de crédito"
    assert spelled(["ver", "estado", "envio"], bare) == "ver estado de envío"  # two nouns linked with "de"
    # the shop writes "numero" without its accent: the toolset's own spelling is kept
    assert spelled(["buscar", "numero"], SHOP) == "buscar numero"


def test_a_proposal_that_explains_nothing_is_advice_and_out_leaves_it_out(tmp_path: Path) -> None:
    """`fix --out` writes what explains a failed trajectory; the precondition that sank nothing is printed
    under its own heading and written only when --only names it."""
    from app.core.advise.fix import candidate_suite

    order = CallFact("emitir_nota_credito", {"id": 1, "monto": 5}, dependency_before="verificar_compra")
    picked = CallFact("ver_saldo", {}, expected="buscar_cliente")
    sunk = [
        TrajectoryFact(
            f"n{i}#0",
            f"n{i}",
            "q",
            False,
            ("selection", "dependency"),
            (picked, order),
            cause=("wrong_tool", "buscar_cliente", "ver_saldo"),
        )
        for i in range(3)
    ]
    got = propose(SHOP, sunk, examples=EXAMPLES)
    written = [p for p in got if not p.advice]  # what --out writes without --only
    doc = candidate_suite({"toolset": {"tools": [t.document() for t in SHOP.tools]}}, written)
    texts = {t["name"]: t["description"] for t in doc["toolset"]["tools"]}
    assert texts["ver_saldo"].endswith(
        'NO sirve para buscar cliente por RUT (formato "12345678-9"): usa buscar_cliente.'
    )
    assert "verificar_compra" not in texts["emitir_nota_credito"]  # the advice is not written
    assert [p.pattern for p in got if p.advice] == ["precondition"]
