"""Multi-turn cases on the runner's side: a fault plan by turn, the runner
driving scripted and simulated-user conversations into one record, the
simulated users, the ``user_error`` checks, and ``toollens run`` with a fake
OpenAI-compatible server playing both the agent and the user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.agents.users import LLMUser, RuleUser
from app.core.records import Message, parse_record
from app.core.run import runner as core_runner
from app.core.run.conversation import asked_for, check_user
from app.core.run.router import FaultPlan, FaultSpecError, MockRouter, Toolbox
from app.core.run.runner import NoUser, run_case, sweep_plans
from app.core.suites.suite import UserSpec, load_suite
from app.runner.session import RunRequest, run_agent
from app.runner.work import plan_work
from app.settings import Settings
from app.store import queries
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.infra import infra_errors
from app.store.models import Run
from tests.fake_llm import FakeLLM, Turn, serve

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "examples" / "conversaciones_v2.yaml"
SPEC = UserSpec(
    instruction="Eres Ana Rojas y quieres saber el saldo de tu cuenta. Das tu RUT solo si te lo piden.",
    known={"rut": "12345678-9"},
    patience=3,
)


def msgs(*pairs: tuple[str, str, int]) -> list[Message]:
    return [Message(role, content, at) for role, content, at in pairs]


# -- the fault plan by turn ------------------------------------------------------------


def test_a_fault_plan_reads_turn_rules() -> None:
    plan = FaultPlan.parse("index:3=timeout,turn:2,index:0=http_503,index:1=not_found,turn:3,index:0,seed:4")
    assert plan.by_index == {3: "timeout"}
    assert plan.by_turn == {(2, 0): "http_503", (2, 1): "not_found", (3, 0): "http_503"}
    assert plan.seed == 4 and not plan.empty
    for bad, said in (
        ("turn:2", "needs an index"),
        ("turn:2,turn:3,index:0", "needs an index"),
        ("turn:0,index:0", "numbered from 1"),
        ("turn:x,index:0", "cannot read"),
        ("turn:2,index:0=oops", "unknown fault kind"),
    ):
        with pytest.raises(FaultSpecError, match=said):
            FaultPlan.parse(bad)


def test_the_router_counts_a_turns_index_from_the_turns_first_call() -> None:
    suite = load_suite(SUITE)
    router = MockRouter(suite.toolset, FaultPlan.parse("turn:2,index:1=http_503"))
    box = Toolbox(router)
    for _ in range(3):  # turn 1: three calls, index 1 of turn 1 is not failed
        box.call("buscar_cliente", {"rut": "12345678-9"})
    router.begin_turn(2)
    box.call("ver_saldo", {"id": 8812})
    box.call("ver_saldo", {"id": 8812})
    assert [c.error.kind if c.error else None for c in router.log] == [None, None, None, None, "http_503"]
    assert router.first_fault is not None and (router.first_fault.step, router.first_fault.kind) == (4, "http_503")


def test_an_unreached_turn_fault_is_still_named_without_a_step() -> None:
    plan = FaultPlan.parse("turn:3,index:0=timeout")
    assert plan.planned() is not None and plan.planned().to_dict() == {"step": None, "kind": "timeout"}  # type: ignore[union-attr]
    assert FaultPlan.parse("index:2=http_500").planned().to_dict() == {"step": 2, "kind": "http_500"}  # type: ignore[union-attr]


def test_the_sweep_of_a_scripted_conversation_fails_each_turns_steps() -> None:
    suite = load_suite(SUITE)
    plans = sweep_plans(suite.case("conv-nota-002"))  # type: ignore[arg-type]
    assert [p.by_turn for p in plans] == [{(1, 0): "http_503"}, {(1, 1): "http_503"}, {(2, 0): "http_503"}]
    items = [(i.trial, i.variant) for i in plan_work(suite, trials=2, sweep=True) if i.case.id == "conv-nota-002"]
    assert items == [(0, ""), (1, ""), (2, "sweep:0:http_503"), (3, "sweep:1:http_503"), (4, "sweep:2:http_503")]


# -- the runner drives a conversation --------------------------------------------------


def scripted_agent(question: str, toolbox: Any) -> str:
    """Old protocol, no memory of its own: reads the conversation on the toolbox."""
    if len(toolbox.messages) == 1:  # turn 1: look up and verify, then ask to confirm
        cliente = json.loads(toolbox.call("buscar_cliente", {"rut": "12345678-9"}))
        toolbox.call("verificar_compra", {"id": cliente["id"], "numero": "PED-12345"})
        return "La compra está verificada. ¿Confirmas la nota de crédito por $45.990?"
    for _ in range(2):  # turn 2: issue it, one retry after an error
        nota = toolbox.call("emitir_nota_credito", {"id": 8812, "monto": 45990, "motivo": "cobro duplicado"})
        if not toolbox.last_failed:
            return f"Listo: nota {json.loads(nota)['nota']}."
    return "No pude emitirla."


def test_a_scripted_conversation_with_a_fault_in_turn_2_makes_one_record() -> None:
    suite = load_suite(SUITE)
    case = suite.case("conv-nota-002")
    assert case is not None
    traj = run_case(scripted_agent, suite, case, trial=1, faults=FaultPlan.parse("turn:2,index:0=http_503"))
    record = traj.to_dict()
    assert [(c["name"], c["error"]["kind"] if c["error"] else None) for c in record["calls"]] == [
        ("buscar_cliente", None),
        ("verificar_compra", None),
        ("emitir_nota_credito", "http_503"),
        ("emitir_nota_credito", None),
    ]
    assert record["fault"] == {"step": 2, "kind": "http_503"}  # the first call of turn 2 is call 2 of the trajectory
    assert record["messages"] == [
        {"role": "user", "content": case.turns[0].user, "calls_before": 0},  # type: ignore[index]
        {
            "role": "assistant",
            "content": "La compra está verificada. ¿Confirmas la nota de crédito por $45.990?",
            "calls_before": 2,
        },
        {"role": "user", "content": "Sí, confirmo: emite la nota de crédito.", "calls_before": 2},
        {"role": "assistant", "content": "Listo: nota NC-40021.", "calls_before": 4},
    ]
    assert record["question"] == case.question and record["answer"] == "Listo: nota NC-40021."
    assert record["state"] == {"notas_credito": [{"id": 8812, "monto": 45990, "motivo": "cobro duplicado"}]}
    assert "user_error" not in record  # a scripted user makes no user errors
    # the same plan by plain index fails the same call; "turn:1,index:2" fails nothing (turn 1 has 2 calls)
    same = run_case(scripted_agent, suite, case, faults=FaultPlan.parse("index:2=http_503"))
    assert [c.error is not None for c in same.calls] == [False, False, True, False]
    missed = run_case(scripted_agent, suite, case, faults=FaultPlan.parse("turn:1,index:2=http_503"))
    assert [c.error for c in missed.calls] == [None, None, None] and missed.fault is not None
    assert missed.fault.to_dict() == {"step": None, "kind": "http_503"}


class RememberingAgent:
    """New protocol: a conversation object per case run keeps its own history."""

    def __init__(self) -> None:
        self.started = 0

    def new_conversation(self) -> Any:
        self.started += 1
        heard: list[str] = []

        def reply(message: str, toolbox: Any) -> str:
            heard.append(message)
            if "RUT" in message or "rut" in message:
                cliente = json.loads(toolbox.call("buscar_cliente", {"rut": "12345678-9"}))
                saldo = json.loads(toolbox.call("ver_saldo", {"id": cliente["id"]}))
                return f"Tu saldo es {saldo['saldo']} (lo pediste en: {heard[0]})"
            return "¿Me indicas tu RUT?"

        return reply


def test_a_simulated_user_gives_the_rut_only_when_asked_and_stops_when_served() -> None:
    suite = load_suite(SUITE)
    case = suite.case("conv-saldo-001")
    assert case is not None
    agent = RememberingAgent()
    traj = run_case(agent, suite, case, user=RuleUser())
    assert agent.started == 1
    assert [(m.role, m.content, m.calls_before) for m in traj.messages or []] == [
        ("user", "Hola, quiero saber mi saldo.", 0),
        ("assistant", "¿Me indicas tu RUT?", 0),
        ("user", "Mi rut es 12345678-9.", 0),
        ("assistant", "Tu saldo es 142900 (lo pediste en: Hola, quiero saber mi saldo.)", 2),
        ("user", "Gracias, eso es todo. ###STOP###", 2),
    ]
    assert traj.answer.startswith("Tu saldo es 142900") and [c.name for c in traj.calls] == [
        "buscar_cliente",
        "ver_saldo",
    ]
    with pytest.raises(NoUser, match="conv-saldo-001"):
        run_case(agent, suite, case)


def test_a_user_that_never_stops_is_cut_after_patience_replies() -> None:
    suite = load_suite(SUITE)
    case = suite.case("conv-pedido-001")  # patience 3

    class Chatty:
        def reply(self, spec: UserSpec, transcript: list[Message]) -> str:
            return "Cuéntame más."

    traj = run_case(lambda q, box: "¿Algo más?", suite, case, user=Chatty())  # type: ignore[arg-type]
    roles = [m.role for m in traj.messages or []]
    assert roles == ["user", "assistant"] * 4  # the question, then 3 replies, each answered


def test_a_turn_that_ends_the_agent_loop_ends_the_conversation() -> None:
    suite = load_suite(SUITE)
    case = suite.case("conv-nota-002")

    def crashing(question: str, toolbox: Any) -> str:
        toolbox.call("buscar_cliente", {"rut": "12345678-9"})
        raise RuntimeError("boom")

    import asyncio

    traj = asyncio.run(core_runner.arun_case(crashing, suite, case, record_crash=True))  # type: ignore[arg-type]
    assert traj.stopped == "agent_error" and len(traj.messages or []) == 2 and len(traj.calls) == 1


# -- the rule-based user and the user_error checks ---------------------------------------


def test_the_rule_user_gives_facts_when_asked_confirms_stops_and_gives_up() -> None:
    user = RuleUser()
    q = ("user", "Hola, quiero saber mi saldo.", 0)
    assert user.reply(SPEC, msgs(q, ("assistant", "Necesito tu RUT, por favor.", 0))) == "Mi rut es 12345678-9."
    assert user.reply(SPEC, msgs(q, ("assistant", "Hola. ¿En qué te ayudo?", 0))) == "No tengo ese dato."
    assert user.reply(SPEC, msgs(q, ("assistant", "¿Confirmas que emita la nota?", 0))) == "Sí, confirmo."
    assert user.reply(SPEC, msgs(q, ("assistant", "Tu saldo es 142900.", 2))) == "Gracias, eso es todo. ###STOP###"
    late = msgs(
        q,
        ("assistant", "¿Algo?", 0),
        ("user", "No tengo ese dato.", 0),
        ("assistant", "¿Algo?", 0),
        ("user", "No tengo ese dato.", 0),
        ("assistant", "¿Y algo más?", 0),
    )  # its third reply: patience 3
    assert user.reply(SPEC, late) == "Lo dejo aquí, gracias. ###STOP###"
    english = UserSpec(
        instruction="You want your balance and you give your id only when the agent asks.",
        known={"customer_id": "C-1234"},
    )
    assert (
        user.reply(english, msgs(("user", "hi", 0), ("assistant", "What is your customer id?", 0)))
        == "My customer id is C-1234."
    )


def test_asking_for_a_fact_means_asking_and_naming_it() -> None:
    assert asked_for("rut", "¿Me das tu RUT?") and asked_for("rut", "Necesito tu cédula")
    assert asked_for("numero_pedido", "¿Cuál es el número del pedido?")
    assert not asked_for("rut", "Tu RUT quedó registrado.")  # names it, asks nothing
    assert not asked_for("rut", "¿Cuál es tu correo?")


def test_a_well_behaved_user_makes_no_user_error() -> None:
    talk = msgs(
        ("user", "Hola, quiero saber mi saldo.", 0),
        ("assistant", "¿Me indicas tu RUT?", 0),
        ("user", "Mi RUT es 12.345.678-9.", 0),
        ("assistant", "Tu saldo es 142900.", 2),
        ("user", "Gracias ###STOP###", 2),
    )
    assert check_user(SPEC, talk) == []


def test_leaking_the_instruction_is_a_user_error() -> None:
    copied = msgs(
        ("user", "Hola", 0),
        ("assistant", "¿En qué te ayudo?", 0),
        ("user", "Eres Ana Rojas y quieres saber el saldo de tu cuenta.", 0),
    )
    assert check_user(SPEC, copied) == [
        {"kind": "leaked_instruction", "detail": "message 3 copies 8+ words of the instruction"}
    ]
    unasked = msgs(
        ("user", "Hola", 0), ("assistant", "¿En qué te ayudo?", 0), ("user", "Quiero mi saldo, mi RUT es 12345678-9", 0)
    )
    assert check_user(SPEC, unasked) == [
        {"kind": "leaked_instruction", "detail": "message 3 gives rut before the agent asked for it"}
    ]
    given_in_the_question = msgs(
        ("user", "Soy 12345678-9", 0), ("assistant", "¿Qué necesitas?", 0), ("user", "Mi saldo; RUT 12345678-9", 0)
    )
    assert check_user(SPEC, given_in_the_question) == []  # the suite's own question gave it first


def test_stopping_early_is_a_user_error() -> None:
    waiting = msgs(("user", "Hola", 0), ("assistant", "¿Me indicas tu RUT?", 0), ("user", "###STOP###", 0))
    assert check_user(SPEC, waiting) == [
        {
            "kind": "stopped_early",
            "detail": "message 3 ends the conversation while the agent waits for the user's answer",
        }
    ]
    silent = msgs(("user", "Hola", 0), ("assistant", "", 0), ("user", "Chao ###STOP###", 0))
    assert check_user(SPEC, silent)[0]["detail"].endswith("has neither called a tool nor answered")
    answered = msgs(("user", "Hola", 0), ("assistant", "No atendemos hoy.", 0), ("user", "Ok ###STOP###", 0))
    assert check_user(SPEC, answered) == []


def test_contradicting_a_known_fact_is_a_user_error() -> None:
    talk = msgs(("user", "Hola", 0), ("assistant", "¿Me indicas tu RUT?", 0), ("user", "Mi RUT es 12345678-0", 0))
    assert check_user(SPEC, talk) == [
        {"kind": "contradicted_known", "detail": "message 3 says '12345678-0' for rut, known as '12345678-9'"}
    ]


def test_the_runner_writes_user_errors_into_the_record() -> None:
    suite = load_suite(SUITE)
    case = suite.case("conv-saldo-001")

    class Leaky:
        def reply(self, spec: UserSpec, transcript: list[Message]) -> str:
            return "Mi RUT es 12345678-9 ###STOP###"

    traj = run_case(lambda q, box: "Hola, ¿en qué te ayudo?", suite, case, user=Leaky())  # type: ignore[arg-type]
    record = traj.to_dict()
    assert record["user_error"] == [
        {"kind": "leaked_instruction", "detail": "message 3 gives rut before the agent asked for it"}
    ]
    assert parse_record(record).user_error == traj.user_error  # the record reads back as written
    assert traj.messages is not None and traj.messages[-1].to_dict() == {
        "role": "user",
        "content": "Mi RUT es 12345678-9 ###STOP###",
        "calls_before": 0,
    }
    traj = run_case(lambda q, box: "Listo, nada más.", suite, case, user=RuleUser())  # type: ignore[arg-type]
    assert traj.user_error is None and "user_error" not in traj.to_dict()  # no user error: nothing to write


# -- toollens run with a fake endpoint playing the agent and the user ---------------------

QUESTION = "Hola, quiero saber mi saldo."


def agent_and_user(request: dict[str, Any]) -> Turn:
    """The agent model (``agent-m``) asks for the RUT, then calls two tools and
    answers; the user model (``user-m``) gives the RUT when asked, then stops."""
    messages = request["messages"]
    last = messages[-1]
    if request["model"] == "user-m":
        return Turn(text="Mi RUT es 12345678-9." if "RUT" in last["content"] else "Gracias. ###STOP###")
    tools = sum(1 for m in messages if m["role"] == "tool")
    if tools == 0 and "12345678-9" not in last.get("content", ""):
        return Turn(text="¿Me indicas tu RUT?")
    if tools == 0:
        return Turn(calls=[("buscar_cliente", {"rut": "12345678-9"})])
    if tools == 1:
        return Turn(calls=[("ver_saldo", {"id": 8812})])
    return Turn(text="Tu saldo es $142.900.")


def suite_file(tmp_path: Path) -> Path:
    """The one case ``conv-saldo-001`` of the example conversations, as a suite file."""
    text = SUITE.read_text(encoding="utf-8")
    head, _, rest = text.partition("cases:\n")
    case = rest.split("\n\n")[0]
    path = tmp_path / "one.yaml"
    path.write_text(
        f"{head}cases:\n{case}\n".replace("toolset_v2.yaml", str(ROOT / "examples" / "toolset_v2.yaml")),
        encoding="utf-8",
    )
    assert [c.id for c in load_suite(path).cases] == ["conv-saldo-001"]
    return path


def records(url: str, run_name: str) -> list[dict[str, Any]]:
    engine = make_engine(url)
    try:
        with session_scope(make_sessionmaker(engine)) as s:
            run_id = s.scalar(select(Run.id).where(Run.name == run_name))
            return list(queries.export_records(s, run_id))  # type: ignore[arg-type]
    finally:
        engine.dispose()


def test_toollens_run_drives_agent_and_user_models_through_a_conversation(tmp_path: Path) -> None:
    app = FakeLLM(responder=agent_and_user)
    url = f"sqlite:///{tmp_path / 'conv.db'}"
    with serve(app) as base:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.cli",
                "run",
                str(suite_file(tmp_path)),
                "--agent",
                "openai",
                "--model",
                "agent-m",
                "--user-model",
                "user-m",
                "--base-url",
                f"{base}/v1",
                "--run",
                "conv",
                "--db",
                url,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "OPENAI_API_KEY": "k"},
        )
    assert done.returncode == 0, done.stderr
    [record] = records(url, "conv")
    assert [(m["role"], m["content"], m["calls_before"]) for m in record["messages"]] == [
        ("user", QUESTION, 0),
        ("assistant", "¿Me indicas tu RUT?", 0),
        ("user", "Mi RUT es 12345678-9.", 0),
        ("assistant", "Tu saldo es $142.900.", 2),
        ("user", "Gracias. ###STOP###", 2),
    ]
    assert [c["name"] for c in record["calls"]] == ["buscar_cliente", "ver_saldo"]
    assert record["answer"] == "Tu saldo es $142.900."
    agent_calls = [r for r in app.requests if r["model"] == "agent-m"]
    user_calls = [r for r in app.requests if r["model"] == "user-m"]
    assert len(agent_calls) == 4 and len(user_calls) == 2
    # the agent's second turn carries the whole history: both user messages, its question, the tool calls' ids
    last = agent_calls[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "tool", "assistant", "tool"]
    assert last[1]["content"] == "¿Me indicas tu RUT?" and last[2]["content"] == "Mi RUT es 12345678-9."
    # the user model sees the conversation from its side: its instruction and facts, the agent as "user"
    prompt = user_calls[0]["messages"]
    assert (
        prompt[0]["role"] == "system" and "12345678-9" in prompt[0]["content"] and "###STOP###" in prompt[0]["content"]
    )
    assert [(m["role"], m["content"]) for m in prompt[1:]] == [("assistant", QUESTION), ("user", "¿Me indicas tu RUT?")]
    assert "tools" not in user_calls[0]


def test_resume_runs_a_half_done_conversation_again_whole(tmp_path: Path) -> None:
    app = FakeLLM(responder=agent_and_user)
    app.errors[QUESTION] = [0, 500, 500]  # the agent's first turn answers; its second turn keeps failing
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'half.db'}")
    with serve(app) as base:
        request = RunRequest(
            agent="openai",
            model="agent-m",
            user_model="user-m",
            base_url=f"{base}/v1",
            suite_path=suite_file(tmp_path),
            run_name="half",
            attempts=2,
            backoff=0.01,
        )
        out = run_agent(settings, request)
        assert out.summary.infra_errors == 1 and out.summary.stored == 0 and not out.finished
        assert records(settings.database_url, "half") == []  # nothing of the half-done conversation is stored
        engine = make_engine(settings.database_url)
        with session_scope(make_sessionmaker(engine)) as s:
            run_id = s.scalar(select(Run.id).where(Run.name == "half"))
            assert [(e.case_id, e.trial) for e in infra_errors(s, run_id)] == [("conv-saldo-001", 0)]  # type: ignore[arg-type]
        engine.dispose()
        before = len(app.requests)
        again = run_agent(settings, RunRequest(resume="half", attempts=2, backoff=0.01))
        assert again.summary.stored == 1 and again.finished
    first_turns = [r for r in app.requests[before:] if r["model"] == "agent-m" and len(r["messages"]) == 1]
    assert len(first_turns) == 1  # the resumed run started the conversation from its first message
    [record] = records(settings.database_url, "half")
    assert [c["name"] for c in record["calls"]] == ["buscar_cliente", "ver_saldo"]
    assert len(record["messages"]) == 5


def test_a_user_model_is_an_openai_compatible_client() -> None:
    user = LLMUser(model="u")
    prompt = user.prompt(SPEC, msgs(("user", "Hola", 0), ("assistant", "¿Tu RUT?", 0)))
    assert "Das tu RUT solo si te lo piden" in prompt[0]["content"] and '"rut": "12345678-9"' in prompt[0]["content"]
    assert prompt[1:] == [{"role": "assistant", "content": "Hola"}, {"role": "user", "content": "¿Tu RUT?"}]


def anthropic_agent_turns(request: dict[str, Any]) -> Turn:
    """Asks for the RUT; once told, looks the customer up and answers."""
    messages = request["messages"]
    results = sum(
        1
        for m in messages
        if isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
    )
    if results:
        return Turn(text="Pedro Soto, tu saldo es $38.500.")
    if "9876543-K" in str(messages[-1]["content"]):
        return Turn(calls=[("buscar_cliente", {"rut": "9876543-K"})])
    return Turn(text="¿Me das tu RUT?")


def test_the_anthropic_agent_sends_the_whole_conversation_every_turn() -> None:
    from app.agents.anthropic_messages import AnthropicAgent

    suite = load_suite(SUITE)
    case = suite.case("conv-saldo-002")
    assert case is not None
    app = FakeLLM(responder=anthropic_agent_turns)
    with serve(app) as base:
        traj = run_case(AnthropicAgent(model="m", base_url=base, api_key="k"), suite, case)
    assert [m.content for m in traj.messages or []] == [
        "Hola, ¿me ayudas a ver mi saldo?",
        "¿Me das tu RUT?",
        "Claro, mi RUT es 9876543-K.",
        "Pedro Soto, tu saldo es $38.500.",
    ]
    assert [c.name for c in traj.calls] == ["buscar_cliente"] and traj.calls[0].error is None
    last = app.requests[-1]["messages"]
    assert [
        (m["role"], m["content"] if isinstance(m["content"], str) else [b["type"] for b in m["content"]]) for m in last
    ] == [
        ("user", "Hola, ¿me ayudas a ver mi saldo?"),
        ("assistant", ["text"]),
        ("user", "Claro, mi RUT es 9876543-K."),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
    ]


def test_an_agent_reads_the_conversation_so_far_on_the_toolbox() -> None:
    suite = load_suite(SUITE)
    seen: list[list[dict[str, str]]] = []

    def agent(question: str, toolbox: Any) -> str:
        seen.append(list(toolbox.messages))
        return f"eco {len(seen)}"

    run_case(agent, suite, suite.case("conv-saldo-002"))  # type: ignore[arg-type]
    assert seen == [
        [{"role": "user", "content": "Hola, ¿me ayudas a ver mi saldo?"}],
        [
            {"role": "user", "content": "Hola, ¿me ayudas a ver mi saldo?"},
            {"role": "assistant", "content": "eco 1"},
            {"role": "user", "content": "Claro, mi RUT es 9876543-K."},
        ],
    ]
    single = load_suite(ROOT / "examples" / "suite_v2.yaml")
    run_case(agent, single, single.cases[0])
    assert seen[-1] == [{"role": "user", "content": single.cases[0].question}]
