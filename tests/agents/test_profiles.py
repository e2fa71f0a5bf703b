"""The simulated user's profiles (app/agents/profiles.py, app/core/reports/profiles.py):
each profile's act on a hand-made conversation, seeded; ``--user-profile``'s
names; and where a profile's case runs land among a run's trials."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from app.agents.profiles import ProfiledConversation, ProfiledUser, wrong_value
from app.agents.users import RuleUser
from app.core.records import Message
from app.core.reports.profiles import NAMES, PROFILES, ProfileError, parse_profiles
from app.core.run.conversation import check_user
from app.core.run.runner import run_case
from app.core.score.scoring import Scorer
from app.core.suites.suite import UserSpec, load_suite, parse_suite
from app.runner.work import plan_work

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPEC = UserSpec(
    instruction="Eres Ana Rojas y quieres una nota de crédito. Das tus datos solo si te los piden.",
    known={"rut": "12345678-9", "pedido": "PED-12345"},
    patience=6,
)
ASK_BOTH = "¿Me das tu RUT y tu número de pedido?"
ASK_RUT = "¿Me das tu RUT?"
CONFIRM = "¿Confirmas que emito la nota de crédito?"


def talk(conv: ProfiledConversation | RuleUser, *agent: str) -> list[str]:
    """The user's replies to the agent's messages, in order (the first user message is the case's)."""
    transcript = [Message("user", "Hola, necesito una nota de crédito.", 0)]
    said = []
    for text in agent:
        transcript.append(Message("assistant", text, 0))
        reply = str(conv.reply(SPEC, transcript))
        said.append(reply)
        transcript.append(Message("user", reply, 0))
    return said


def conversation(profile: str, *, fires: bool = True) -> ProfiledConversation:
    return ProfiledConversation(profile, random.Random(1), fires=fires)


def test_the_cooperative_user_gives_everything_asked_at_once() -> None:
    assert talk(RuleUser(), ASK_BOTH) == ["Mi rut es 12345678-9. Mi pedido es PED-12345."]


def test_drip_feed_gives_one_fact_per_reply() -> None:
    conv = conversation("drip_feed")
    assert talk(conv, ASK_BOTH, "Gracias, ¿y el otro dato?") == ["Mi rut es 12345678-9.", "Mi pedido es PED-12345."]
    assert [a.kind for a in conv.acts] == ["held_back", "held_back"]
    assert "message 3" in conv.acts[0].detail  # the reply's index in the conversation, from 1


def test_drip_feed_does_nothing_to_an_agent_asking_one_thing_at_a_time() -> None:
    conv = conversation("drip_feed")
    assert talk(conv, ASK_RUT) == ["Mi rut es 12345678-9."] and conv.acts == []


def test_wrong_assumption_gives_a_wrong_value_then_corrects_it() -> None:
    conv = conversation("wrong_assumption")
    first, second = talk(conv, ASK_RUT, "Listo.")
    bad = first.removeprefix("Mi rut es ").removesuffix(".")
    assert bad != "12345678-9" and len(bad) == len("12345678-9") and bad[-2] == "-"
    assert second == "Perdón, me equivoqué: mi rut es 12345678-9."  # alone: its thanks would end it
    again = conversation("wrong_assumption")
    assert talk(again, ASK_RUT, CONFIRM)[1] == "Perdón, me equivoqué: mi rut es 12345678-9. Sí, confirmo."
    assert [a.kind for a in conv.acts] == ["wrong_value", "corrected"]
    transcript = [Message("user", "Hola", 0), Message("assistant", ASK_RUT, 0), Message("user", first, 0)]
    assert [e["kind"] for e in check_user(SPEC, transcript)] == ["contradicted_known"]  # an independent check sees it


def test_omits_detail_withholds_a_fact_until_asked_again() -> None:
    conv = conversation("omits_detail")
    assert talk(conv, ASK_RUT, ASK_RUT) == ["No tengo ese dato a mano ahora.", "Mi rut es 12345678-9."]
    assert [a.kind for a in conv.acts] == ["withheld"]


def test_changes_mind_declines_then_takes_it_back() -> None:
    conv = conversation("changes_mind")
    assert talk(conv, CONFIRM, "Entendido, no la emito.") == [
        "No, espera: mejor no lo hagas todavía.",
        "Pensándolo bien, sí: hazlo. Confirmo.",
    ]
    assert [a.kind for a in conv.acts] == ["declined", "took_back"]


def test_a_conversation_the_profile_does_not_fire_in_is_the_cooperative_one() -> None:
    for profile in ("wrong_assumption", "omits_detail", "changes_mind"):
        conv = conversation(profile, fires=False)
        assert talk(conv, ASK_RUT, CONFIRM) == talk(RuleUser(), ASK_RUT, CONFIRM) and conv.acts == []


def test_impatient_leaves_only_from_its_second_reply_and_only_when_asked() -> None:
    left = 0
    for seed in range(40):
        conv = ProfiledUser("impatient", seed).for_conversation("c", 0)
        replies = talk(conv, ASK_RUT, CONFIRM)
        assert replies[0] == "Mi rut es 12345678-9."  # never at its first reply
        if "###STOP###" in replies[1] and "No tengo tiempo" in replies[1]:
            left += 1
            assert [a.kind for a in conv.acts] == ["ended_early"]
    assert 10 <= left <= 30  # rate 0.5 at that turn


def test_a_profile_is_seeded_by_run_seed_case_trial_and_profile() -> None:
    def replies(seed: int, case: str, trial: int) -> list[list[str]]:
        return [talk(ProfiledUser("wrong_assumption", seed).for_conversation(case, trial), ASK_RUT) for _ in range(2)]

    assert replies(3, "a", 0)[0] == replies(3, "a", 0)[1]
    drawn = {tuple(replies(3, "a", t)[0]) for t in range(12)}
    assert len(drawn) > 1  # the trials differ: fired or not, and which digit


def test_a_wrong_value_is_written_like_the_true_one() -> None:
    rng = random.Random(0)
    for value in ("12345678-9", "PED-12345", "ABCDEF"):
        for _ in range(20):
            bad = wrong_value(value, rng)
            assert bad != value and len(bad) == len(value)
            assert [c.isdigit() for c in bad] == [c.isdigit() for c in value]


def test_user_profile_names() -> None:
    assert parse_profiles([]) == []
    assert parse_profiles(["impatient"]) == ["cooperative", "impatient"]
    assert parse_profiles(["changes-mind,drip_feed", "impatient"]) == [
        "cooperative",
        "impatient",
        "drip_feed",
        "changes_mind",
    ]
    assert parse_profiles(["all"]) == list(NAMES)
    with pytest.raises(ProfileError, match="'grumpy': not a profile"):
        parse_profiles(["grumpy"])
    assert [p.index for p in PROFILES] == list(range(len(PROFILES)))


def test_a_profiles_trials_come_after_the_sweep_whatever_else_runs() -> None:
    suite = parse_suite(
        {
            "name": "s",
            "toolset": [
                {"name": "buscar", "description": "Busca un cliente por RUT."},
                {"name": "emitir", "description": "Emite una nota."},
            ],
            "cases": [
                {
                    "id": "u",
                    "question": "Hola",
                    "expected_calls": ["buscar", "emitir"],
                    "user": {"instruction": "Eres un cliente", "known": {"rut": "1-9"}},
                },
                {"id": "q", "question": "¿Saldo?", "expected_calls": ["buscar"]},
            ],
        }
    )
    items = plan_work(suite, trials=2, sweep=True, profiles=["cooperative", "impatient", "changes_mind"])
    got = [(i.case.id, i.trial, i.profile, i.mirrors) for i in items if i.profile != "cooperative"]
    # case u: plain trials 0-1, sweep 2-3; impatient (index 1) from 4, changes_mind (index 5) from 4 + 4 * 2
    assert got == [
        ("u", 4, "impatient", 0),
        ("u", 5, "impatient", 1),
        ("u", 12, "changes_mind", 0),
        ("u", 13, "changes_mind", 1),
    ]
    assert {i.case.id for i in items if i.profile != "cooperative"} == {"u"}  # a case without a simulated user: none
    assert [i.agent_seed() for i in items if i.profile == "impatient"] == [(0, ""), (1, "")]
    alone = plan_work(suite, trials=2, sweep=True, profiles=["cooperative", "changes_mind"])
    assert [i.trial for i in alone if i.profile == "changes_mind"] == [12, 13]  # the same trials: runs pair up


# -- the blame on a known injected fault -------------------------------------------


class Omits:
    """The omitting user, firing in every conversation."""

    def for_conversation(self, case_id: str, trial: int) -> ProfiledConversation:
        return ProfiledConversation("omits_detail", random.Random(trial), fires=True)


def pedido_agent(asks: int) -> Any:
    """Asks for the order number up to ``asks`` times, then gives up; looks it up once said."""

    def agent(question: str, toolbox: Any) -> str:
        said = " ".join(m["content"] for m in toolbox.messages if m["role"] == "user")
        found = re.search(r"PED-\d{5}", said)
        if found:
            return f"Tu pedido: {toolbox.call('buscar_pedido', {'numero': found.group(0)})}"
        if sum(1 for m in toolbox.messages if m["role"] == "assistant") < asks:
            return "¿Me das tu número de pedido?"
        return "Sin ese dato no puedo seguir."

    return agent


def test_the_blame_charges_an_omitted_fact_to_the_user_only_when_it_was_never_given() -> None:
    suite = load_suite(EXAMPLES / "conversaciones_v2.yaml")
    case = suite.case("conv-pedido-001")
    assert case is not None
    scorer = Scorer(suite)
    once = run_case(pedido_agent(1), suite, case, user=Omits())  # type: ignore[arg-type]
    assert once.user_profile == "omits_detail" and [a.kind for a in once.user_acts or []] == ["withheld"]
    blame = scorer.score(once).blame
    assert blame is not None and (blame["blame"], blame["detector"]) == ("user", "withholds")
    assert "No tengo ese dato a mano" in blame["evidence"]
    twice = run_case(pedido_agent(2), suite, case, user=Omits())  # type: ignore[arg-type]
    assert scorer.score(twice).passed  # asked again, the user gives it: nothing to blame
    plain = run_case(pedido_agent(1), suite, case, user=RuleUser())
    assert plain.user_profile == "cooperative" and plain.user_acts is None and scorer.score(plain).passed


class Wrong:
    """The wrong-assumption user, firing in every conversation."""

    def for_conversation(self, case_id: str, trial: int) -> ProfiledConversation:
        return ProfiledConversation("wrong_assumption", random.Random(trial), fires=True)


def test_the_blame_of_a_user_error_quotes_the_user_message_it_names() -> None:
    """The user's own recorded fault ("message 3 says …") is blamed with that message quoted
    and its index, not the check's own sentence as if it were what the user said."""
    suite = load_suite(EXAMPLES / "conversaciones_v2.yaml")
    case = suite.case("conv-pedido-001")
    assert case is not None
    traj = run_case(pedido_agent(1), suite, case, user=Wrong())  # type: ignore[arg-type]
    said = traj.messages[2].content  # the question, the agent's ask, then the wrong number
    assert traj.messages[2].role == "user" and re.search(r"PED-\d{5}", said) and "PED-20031" not in said
    assert traj.user_error and traj.user_error[0].detail.startswith("message 3 says ")
    blame = Scorer(suite).score(traj).blame
    assert blame is not None and (blame["blame"], blame["detector"]) == ("user", "simulator_error")
    assert (blame["at"], blame["quote"]) == (2, said)
    assert traj.user_error[0].detail in blame["findings"][0]["detail"]  # the check's sentence kept as the detail


# -- a user model under a profile: its departures recorded as the same acts ------------------


def model_user(profile: str, plays: Any) -> Any:
    """A user model under ``profile`` (LLMUser.for_conversation) whose replies are what ``plays``
    says (a fake model: no network)."""
    from app.agents.users import LLMUser

    model = LLMUser(model="u", profile=profile)

    async def reply(spec: UserSpec, transcript: list[Message]) -> str:
        return str(plays.reply(spec, transcript))

    model.reply = reply  # type: ignore[method-assign]
    return model.for_conversation("c", 0)


def model_talk(conv: Any, *agent: str) -> list[str]:
    import asyncio

    transcript = [Message("user", "Hola, necesito una nota de crédito.", 0)]
    said = []
    for text in agent:
        transcript.append(Message("assistant", text, 0))
        said.append(asyncio.run(conv.reply(SPEC, list(transcript))))
        transcript.append(Message("user", said[-1], 0))
    return said


@pytest.mark.parametrize(
    ("profile", "agent"),
    [
        ("drip_feed", (ASK_BOTH, "Gracias, ¿y el otro dato?")),
        ("wrong_assumption", (ASK_RUT, "Listo.")),
        ("omits_detail", (ASK_RUT, ASK_RUT)),
        ("changes_mind", (CONFIRM, "Entendido, no la emito.")),
        ("impatient", (ASK_RUT, CONFIRM)),
    ],
)
def test_a_user_models_departures_are_the_acts_the_rule_based_user_records(
    profile: str, agent: tuple[str, ...]
) -> None:
    seed = next(
        s
        for s in range(50)
        if talk(rule := ProfiledUser(profile, s).for_conversation("c", 0), *agent)
        and rule.acts
        and len(rule.acts) == {"omits_detail": 1, "impatient": 1}.get(profile, 2)
    )
    rule = ProfiledUser(profile, seed).for_conversation("c", 0)  # the same replies again, played by the model
    model = model_user(profile, rule)
    model_talk(model, *agent)
    assert [a.to_dict() for a in model.acts] == [a.to_dict() for a in rule.acts] != []
    assert model.profile == profile and model.label == "user-model"
    cooperative = model_user(profile, RuleUser())  # told its profile, the model did not follow it: no act
    model_talk(cooperative, *agent)
    assert cooperative.acts == []


def test_a_user_model_that_leaves_early_under_a_profile_has_it_on_its_record() -> None:
    from app.agents.users import LLMUser

    suite = load_suite(EXAMPLES / "conversaciones_v2.yaml")
    case = suite.case("conv-pedido-001")
    assert case is not None
    model = LLMUser(model="u", profile="impatient")
    said = iter(["Hola de nuevo.", "No tengo tiempo, adiós. ###STOP###"])

    async def reply(spec: UserSpec, transcript: list[Message]) -> str:
        return next(said)

    model.reply = reply  # type: ignore[method-assign]
    traj = run_case(pedido_agent(3), suite, case, user=model)
    assert traj.user_profile == "impatient"
    assert [a.to_dict() for a in traj.user_acts or []] == [
        {"kind": "ended_early", "detail": "message 5: leaves while the agent asks instead of serving"}
    ]
    assert LLMUser(model="u").for_conversation("c", 0).profile == "cooperative"  # plays as itself: no acts


def test_a_user_model_whose_first_fact_is_right_has_no_wrong_value_act_later() -> None:
    replies = iter(["Mi rut es 12345678-9.", "Mi pedido es PED-12346."])  # the second one wrong: a mistake

    class Says:
        def reply(self, spec: UserSpec, transcript: list[Message]) -> str:
            return next(replies)

    conv = model_user("wrong_assumption", Says())
    model_talk(conv, ASK_RUT, "¿Y tu número de pedido?")
    assert conv.acts == []  # check_user's contradicted_known has it, as any user model's mistake
    first_wrong = model_user("wrong_assumption", Says())
    replies = iter(["Mi rut es 12345678-8.", "Perdón: mi rut es 12345678-9."])
    model_talk(first_wrong, ASK_RUT, "No encuentro ese RUT.")
    assert [(a.kind, a.detail) for a in first_wrong.acts] == [
        ("wrong_value", "message 3: gives rut as 12345678-8, not 12345678-9"),
        ("corrected", "message 5: corrects rut to 12345678-9"),
    ]


def test_a_user_model_s_decline_reads_the_typographic_apostrophe() -> None:
    """A user model under changes_mind that writes "Don’t" (as models often do) declines, as with "Don't"."""
    from app.agents.model_acts import ModelConversation

    transcript = [Message("user", "I need a credit note.", 0), Message("assistant", "Shall I proceed?", 0)]
    for reply in ("Don't do it yet.", "Don’t do it yet."):
        conv = ModelConversation(model=None, profile="changes_mind")
        conv.read(SPEC, transcript, reply)
        assert [a.kind for a in conv.acts] == ["declined"], reply
