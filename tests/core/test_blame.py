"""Who failed a conversation (app/core/score/blame.py): each detector on a small
τ²-style conversation of our own, on both sides of its rule; the text rules
on phrasings written apart from them (tests/gold/blame_phrasings.yaml); and
the hand labels of tests/gold/blame.yaml on the real runs, dev and held-out
parts apart (docs/blame.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.records import Trajectory
from app.core.score.blame import (
    asks_for_human,
    facts,
    leaves,
    refuses,
    simulator_note,
    takes_back,
)
from app.core.score.scoring import Scorer
from app.core.suites.suite import parse_suite
from app.importers import Options, convert
from tests.resources import DATA

GOLD = Path(__file__).resolve().parents[1] / "gold"
PHRASINGS = yaml.safe_load((GOLD / "blame_phrasings.yaml").read_text(encoding="utf-8"))
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"


# -- a τ² results file of our own ------------------------------------------------


def msg(role: str, content: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"role": role, "content": content, "tool_calls": calls}


def call(cid: str, name: str, requestor: str = "assistant", **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments, "requestor": requestor}


def result(cid: str, content: str, requestor: str = "assistant") -> dict[str, Any]:
    return {"id": cid, "role": "tool", "content": content, "requestor": requestor}


INSTRUCTIONS = {
    "known_info": "You are ana_lima_4410, email ana@example.com.",
    "reason_for_call": "You want to cancel order #W7000001.",
    "task_instructions": "If the agent asks for a reason, say it is no longer needed.",
}
CANCEL = {
    "action_id": "c0",
    "requestor": "assistant",
    "name": "cancel_order",
    "arguments": {"order_id": "#W7000001", "reason": "no longer needed"},
}


def blame_of_messages(
    tmp_path: Path,
    messages: list[dict[str, Any]],
    *,
    reward: float = 0.0,
    instructions: dict[str, Any] | None = None,
    actions: list[dict[str, Any]] | None = None,
    opening: bool = True,
) -> dict[str, Any] | None:
    """Import one simulation through the τ² importer, score it, and return its blame (``at``
    counts the three opening messages)."""
    task = {
        "id": "t",
        "user_scenario": {"instructions": INSTRUCTIONS if instructions is None else instructions},
        "evaluation_criteria": {"actions": [CANCEL] if actions is None else actions},
    }
    # a conversation: two user turns or more (the scorer blames conversations only)
    first = [msg("assistant", "Hello."), msg("user", "Hi there."), msg("assistant", "What do you need?")]
    sim = {
        "id": "s",
        "task_id": "t",
        "trial": 0,
        "messages": (first if opening else []) + messages,
        "reward_info": {"reward": reward},
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"tasks": [task], "simulations": [sim]}), encoding="utf-8")
    conversion = convert("tau2", path, Options())
    traj = next(t for _, t in conversion.records() if isinstance(t, Trajectory))
    return Scorer(parse_suite(conversion.suite)).score(traj).blame


HELLO = msg("assistant", "Hi! How can I help you today?")
ASK_ID = msg("assistant", "Sure. What is your user id?")


def cancel_done(reason: str = "no longer needed") -> list[dict[str, Any]]:
    return [
        msg("assistant", None, [call("a1", "cancel_order", order_id="#W7000001", reason=reason)]),
        result("a1", '{"status": "cancelled"}'),
    ]


# -- user detectors ----------------------------------------------------------------


def test_a_stop_token_in_the_message_that_asks_for_the_write_is_the_users(tmp_path: Path) -> None:
    b = blame_of_messages(
        tmp_path,
        [HELLO, msg("user", "I am ana_lima_4410. Please cancel #W7000001, it is no longer needed. ###STOP###")],
    )
    assert b is not None and (b["blame"], b["detector"], b["confidence"]) == ("user", "early_stop", 0.85)
    assert b["quote"].endswith("###STOP###") and b["at"] == 4


def test_a_stop_after_the_write_was_refused_is_no_early_stop(tmp_path: Path) -> None:
    b = blame_of_messages(
        tmp_path,
        [
            HELLO,
            msg("user", "I am ana_lima_4410. Can you cancel #W7000001?"),
            msg("assistant", "I'm sorry, but this order has shipped: it cannot be cancelled."),
            msg("user", "Oh well. Thanks anyway, goodbye. ###STOP###"),
        ],
    )
    assert b is not None and b["blame"] == "agent" and b["detector"] == "agent_missing_write"


def test_transfer_token_the_agent_never_made_is_the_users(tmp_path: Path) -> None:
    b = blame_of_messages(
        tmp_path,
        [
            HELLO,
            msg("user", "I am ana_lima_4410, cancel #W7000001 please."),
            msg("assistant", "Sure, may I have the reason?"),
            msg("user", "###TRANSFER###"),
        ],
    )
    assert b is not None and (b["blame"], b["detector"]) == ("user", "early_stop")
    assert "never transferred" in b["evidence"]


def test_the_user_never_gives_the_id_its_instructions_hold(tmp_path: Path) -> None:
    b = blame_of_messages(
        tmp_path,
        [
            HELLO,
            msg("user", "I want to cancel an order."),
            ASK_ID,
            msg("user", "I don't have my user id with me right now."),
            msg("assistant", "I need it to continue."),
        ],
    )
    assert b is not None and (b["blame"], b["detector"], b["at"]) == ("user", "withholds", 6)
    assert "ana_lima_4410" in b["evidence"]
    # the same conversation, the id given: no withholding
    b = blame_of_messages(
        tmp_path,
        [
            HELLO,
            msg("user", "I want to cancel an order."),
            ASK_ID,
            msg("user", "It is ana_lima_4410."),
            msg("assistant", "Thanks, one moment."),
        ],
    )
    assert b is not None and b["detector"] != "withholds"


def test_a_date_nothing_holds_is_an_unfounded_fact(tmp_path: Path) -> None:
    b = blame_of_messages(
        tmp_path, [HELLO, msg("user", "I am ana_lima_4410. Cancel #W7000001, placed on March 14, 2024.")]
    )
    assert b is not None and (b["blame"], b["detector"]) == ("user", "unfounded_fact")
    assert "2024-03-14" in b["evidence"]
    # the agent said the date first: the user repeats it, no blame
    b = blame_of_messages(
        tmp_path,
        [
            HELLO,
            msg("user", "I am ana_lima_4410."),
            msg("assistant", "I see order #W7000001 from March 14, 2024."),
            msg("user", "Yes, the one from March 14, 2024."),
        ],
    )
    assert b is not None and b["detector"] != "unfounded_fact"


def test_asking_for_a_human_the_instructions_never_mention(tmp_path: Path) -> None:
    b = blame_of_messages(tmp_path, [HELLO, msg("user", "I am ana_lima_4410. Can I speak to a supervisor?")])
    assert b is not None and (b["blame"], b["detector"]) == ("user", "asks_human")
    scripted = {**INSTRUCTIONS, "task_instructions": "Ask for a human agent if anything goes wrong."}
    b = blame_of_messages(
        tmp_path, [HELLO, msg("user", "I am ana_lima_4410. Can I speak to a supervisor?")], instructions=scripted
    )
    assert b is not None and b["detector"] != "asks_human"


def test_taking_back_a_confirmed_write_blames_the_confirmation(tmp_path: Path) -> None:
    b = blame_of_messages(
        tmp_path,
        [
            HELLO,
            msg("user", "I am ana_lima_4410, cancel #W7000001 please, it is no longer needed."),
            msg("assistant", "Shall I cancel it?"),
            msg("user", "Yes."),
            *cancel_done("ordered by mistake"),
            msg("user", "On second thought, please undo that."),
        ],
        reward=0.0,
    )
    assert b is not None and (b["blame"], b["detector"], b["at"]) == ("user", "changes_mind", 6)
    assert b["quote"] == "Yes."


def test_a_device_action_the_agent_asked_for_and_the_user_never_made(tmp_path: Path) -> None:
    roaming = [{"action_id": "u0", "requestor": "user", "name": "toggle_roaming", "arguments": {}}]
    plain = {"reason_for_call": "Your data does not work abroad."}
    look = [msg("assistant", None, [call("a1", "get_line", line_id="L1")]), result("a1", '{"roaming": true}')]
    asked = [
        HELLO,
        msg("user", "My data does not work."),
        *look,
        msg("assistant", "Please turn on data roaming on your phone: `toggle_roaming`."),
        msg("user", "Hmm, it still does not work."),
    ]
    b = blame_of_messages(tmp_path, asked, instructions=plain, actions=roaming)
    assert b is not None and (b["blame"], b["detector"]) == ("user", "user_action_missing")
    never = [
        HELLO,
        msg("user", "My data does not work."),
        *look,
        msg("assistant", "Let me reset your line."),
        msg("user", "Hmm, it still does not work."),
    ]
    b = blame_of_messages(tmp_path, never, instructions=plain, actions=roaming)
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "user_action_missing")
    assert "never asks for it" in b["evidence"]


def test_too_cooperative_is_recorded_never_blamed(tmp_path: Path) -> None:
    b = blame_of_messages(
        tmp_path,
        [
            HELLO,
            msg("user", "Hi, I am ana_lima_4410 (ana@example.com): please cancel order #W7000001."),
            msg("assistant", "Why?"),
            msg("user", "No longer needed."),
            msg("assistant", "Done."),
        ],
        opening=False,
    )
    assert b is not None and b["blame"] == "agent"
    assert [n["detector"] for n in b["notes"]] == ["too_cooperative"]
    assert b["notes"][0]["detail"] == "the first message gives 3 of the 3 facts the instructions hold"


# -- task detectors ------------------------------------------------------------------


def test_a_reference_wording_the_instructions_never_give_is_the_tasks(tmp_path: Path) -> None:
    silent = {**INSTRUCTIONS, "task_instructions": "You want it gone."}
    talk = [
        HELLO,
        msg("user", "I am ana_lima_4410, cancel #W7000001: I ordered it by mistake."),
        msg("assistant", "What reason should I record?"),
        msg("user", "ordered by mistake"),
        *cancel_done("ordered by mistake"),
        msg("assistant", "Cancelled."),
    ]
    b = blame_of_messages(tmp_path, talk, instructions=silent)
    assert b is not None and (b["blame"], b["detector"], b["confidence"]) == ("task", "reference_unstated_choice", 0.65)
    # the instructions give the reference's wording: the agent used another one, the agent's
    b = blame_of_messages(tmp_path, talk)
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "agent_wrong_write")


def test_reward_zero_with_every_step_done_is_the_tasks(tmp_path: Path) -> None:
    talk = [
        HELLO,
        msg("user", "I am ana_lima_4410, cancel #W7000001, no longer needed."),
        *cancel_done(),
        msg("assistant", "Cancelled."),
    ]
    b = blame_of_messages(tmp_path, talk, reward=0.0)
    assert b is not None and (b["blame"], b["detector"]) == ("task", "reward_without_fault")
    assert blame_of_messages(tmp_path, talk, reward=1.0) is None  # passed: no blame


def test_an_airline_reference_the_policy_forbids(tmp_path: Path) -> None:
    reservation = {
        "reservation_id": "ABC123",
        "origin": "DTW",
        "destination": "LGA",
        "flight_type": "round_trip",
        "cabin": "economy",
        "insurance": "no",
        "created_at": "2024-05-01T10:00:00",
        "flights": [{"flight_number": "HAT001", "origin": "DTW", "destination": "LGA"}],
    }
    search = [
        {"flight_number": "HAT500", "origin": "DTW", "destination": "JFK"},
        {"flight_number": "HAT501", "origin": "JFK", "destination": "DTW"},
    ]
    change = {
        "action_id": "x",
        "requestor": "assistant",
        "name": "update_reservation_flights",
        "arguments": {
            "reservation_id": "ABC123",
            "cabin": "economy",
            "flights": [{"flight_number": "HAT500"}, {"flight_number": "HAT501"}],
        },
    }
    talk = [
        HELLO,
        msg("user", "Change ABC123 to fly to JFK."),
        msg("assistant", None, [call("a1", "get_reservation_details", reservation_id="ABC123")]),
        result("a1", json.dumps(reservation)),
        msg("assistant", None, [call("a2", "search_direct_flight", origin="DTW", destination="JFK")]),
        result("a2", json.dumps(search)),
        msg("assistant", "The destination cannot change."),
    ]
    b = blame_of_messages(tmp_path, talk, instructions={"reason_for_call": "Move the trip to JFK."}, actions=[change])
    assert b is not None and (b["blame"], b["detector"]) == ("task", "reference_against_policy")
    assert "never reach its destination LGA" in b["evidence"]
    # to LGA and back: the destination holds, nothing forbidden
    search[1] = {"flight_number": "HAT501", "origin": "JFK", "destination": "LGA"}
    talk[5] = result("a2", json.dumps(search))
    b = blame_of_messages(tmp_path, talk, instructions={"reason_for_call": "Move the trip."}, actions=[change])
    assert b is not None and b["detector"] != "reference_against_policy"


# -- the text rules on phrasings written apart from them ---------------------------------


@pytest.mark.parametrize(
    ("rule", "check", "right"),
    [
        ("leaving", leaves, (7, 10, 5, 6)),  # (match found, of, no_match left alone, of): misses in docs/blame.md
        ("refusal", refuses, (5, 7, 4, 4)),
        ("asks_human", asks_for_human, (4, 6, 3, 3)),
        ("mind_change", takes_back, (3, 5, 3, 3)),
    ],
)
def test_text_rules_on_phrasings_written_apart(rule: str, check: Any, right: tuple[int, int, int, int]) -> None:
    pool = PHRASINGS[rule]
    found = sum(bool(check(t)) for t in pool["match"])
    left = sum(not check(t) for t in pool["no_match"])
    assert (found, len(pool["match"]), left, len(pool["no_match"])) == right


def test_facts_are_normalised_as_the_pool_says() -> None:
    got = [sorted(facts(item["text"])) == sorted(item["facts"]) for item in PHRASINGS["facts"]]
    assert got == [True, True, True, False, True, True]  # "3 February 1988" (day first) is not read


def test_simulator_note_above_the_share_only() -> None:
    assert simulator_note(1, 10) is None  # 10% is allowed
    note = simulator_note(2, 10)
    assert note is not None and note.startswith("2 of the 10 failures") and "(20%)" in note
    assert simulator_note(2, 10, share=0.25) is None
    assert simulator_note(0, 0) is None


# -- the hand labels, on the real runs ------------------------------------------------------


def _real_blames() -> dict[str, str | None]:
    labels = yaml.safe_load((GOLD / "blame.yaml").read_text(encoding="utf-8"))["conversations"]
    out: dict[str, str | None] = {}
    for name in sorted({k.split("#")[0] for k in labels}):
        path = DATA / name
        domain = "airline" if "airline" in name else "retail" if "retail" in name else None
        fmt = "tau-bench" if name.startswith("tau_bench") else "tau2"
        conversion = convert(fmt, path, Options(tools=SCHEMAS, domain=domain) if domain else Options())
        scorer = Scorer(parse_suite(conversion.suite))
        raw = json.loads(path.read_text(encoding="utf-8"))
        sims = raw["simulations"] if isinstance(raw, dict) else raw
        for sim, (_, traj) in zip(sims, conversion.records(), strict=True):
            key = f"{name}#{sim['task_id']}/{sim.get('trial', 0)}"
            if key in labels and isinstance(traj, Trajectory):
                b = scorer.score(traj).blame
                out[key] = None if b is None else b["blame"]
    return out


@pytest.mark.skipif(not (DATA / "tau2").is_dir() or not SCHEMAS.is_file(), reason="needs the τ² and tau-bench files")
def test_agreement_with_the_hand_labels_dev_held_out_and_blind() -> None:
    labels = yaml.safe_load((GOLD / "blame.yaml").read_text(encoding="utf-8"))["conversations"]
    got = _real_blames()
    agree: Counter[tuple[str, bool]] = Counter()
    for key, label in labels.items():
        agree[(label["split"], got.get(key) == label["blame"])] += 1
    # docs/blame.md: dev 18/19 (tuned on); held-out 16/19 on its first run, 15/19 since "100%" is no amount
    # (#57 had agreed for that wrong reason); blind 16/24 on its first run
    assert {s: (agree[(s, True)], agree[(s, False)]) for s in ("dev", "held", "blind")} == {
        "dev": (18, 1),
        "held": (15, 4),
        "blind": (16, 8),
    }
    disagreements = {
        split: sorted(
            (k.split("#", 1)[1] for k, v in labels.items() if v["split"] == split and got.get(k) != v["blame"]),
            key=lambda k: tuple(map(int, k.split("/"))),
        )
        for split in ("dev", "held", "blind")
    }
    # every one read in docs/blame.md
    assert disagreements == {
        "dev": ["83/0"],
        "held": ["25/0", "42/0", "57/0", "86/0"],
        "blind": ["2/1", "4/1", "11/1", "15/0", "19/1", "21/0", "22/1", "23/1"],
    }
