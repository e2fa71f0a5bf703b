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
    _read_bags,
    asks_for_human,
    asks_outside,
    bag_allowance_note,
    facts,
    leaves,
    refuses,
    simulator_note,
    takes_back,
    write_kind,
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
    policy: str | None = None,
    termination: str | None = None,
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
    if termination is not None:
        sim["termination_reason"] = termination
    doc: dict[str, Any] = {"tasks": [task], "simulations": [sim]}
    if policy is not None:
        doc["info"] = {"environment_info": {"policy": policy}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
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
    # a wrong write first (real telecom: roaming enabled on another line) is the blame's evidence, and the
    # ask the agent never made is listed beside it, not lost
    wrote = [
        *never[:4],
        msg("assistant", None, [call("a2", "enable_roaming", line_id="L2")]),
        result("a2", "ok"),
        *never[4:],
    ]
    b = blame_of_messages(tmp_path, wrote, instructions=plain, actions=roaming)
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "agent_wrong_write")
    assert [(f["who"], f["detector"]) for f in b["findings"]] == [
        ("agent", "agent_wrong_write"),
        ("agent", "user_action_missing"),
    ]


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


def test_a_run_cut_at_the_step_limit_is_never_the_tasks(tmp_path: Path) -> None:
    talk = [
        HELLO,
        msg("user", "I am ana_lima_4410, cancel #W7000001, no longer needed."),
        *cancel_done(),
        msg("assistant", "Cancelled."),
    ]
    # τ²'s max_steps: the reward 0 is the cut, not a grader's verdict; the agent ran out of steps
    b = blame_of_messages(tmp_path, talk, reward=0.0, termination="max_steps")
    assert b is not None and (b["blame"], b["detector"], b["confidence"]) == ("agent", "stopped", 0.6)
    assert b["evidence"] == "the run was cut (step_limit) before any verdict"
    assert "reward_without_fault" not in [f["detector"] for f in b["findings"]]
    # a user finding that comes first still wins
    asks = [HELLO, msg("user", "I am ana_lima_4410. Can I speak to a supervisor?"), *talk[2:]]
    b = blame_of_messages(tmp_path, asks, reward=0.0, termination="max_steps")
    assert b is not None and (b["blame"], b["detector"]) == ("user", "asks_human")


BAGS_POLICY = """Checked bag allowance:
- If the booking user is a regular member:
  - 0 free checked bag for each basic economy passenger
  - 1 free checked bag for each economy passenger
- If the booking user is a gold member:
  - 2 free checked bags for each basic economy passenger
  - {gold} free checked bags for each economy passenger
  - 4 free checked bags for each business passenger
- Each extra baggage is 50 dollars.
"""


def test_bag_allowance_read_from_the_policy_prose_or_list() -> None:
    prose = (
        "Checked bag allowance: If the booking user is a regular member, 0 free checked bag for each basic "
        "economy passenger, 1 free checked bag for each economy passenger, and 2 free checked bags for each "
        "business passenger. If the booking user is a silver member, 1 free checked bag for each basic economy "
        "passenger. Each extra baggage is 50 dollars."
    )
    assert bag_allowance_note(prose) == "regular: basic_economy=0 economy=1 business=2 | silver: basic_economy=1"
    assert bag_allowance_note(BAGS_POLICY.format(gold=3)) == (
        "regular: basic_economy=0 economy=1 | gold: basic_economy=2 economy=3 business=4"
    )
    assert bag_allowance_note("Cancel within 24 hours.") is None


def _bags_talk(first_user: str) -> list[dict[str, Any]]:
    reservation = {
        "reservation_id": "ABC123",
        "user_id": "ana_lima_4410",
        "origin": "DTW",
        "destination": "LGA",
        "cabin": "economy",
        "passengers": [{"first_name": "Ana", "last_name": "Lima"}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "flights": [],
    }
    return [
        HELLO,
        msg("user", first_user),
        msg("assistant", None, [call("a1", "get_user_details", user_id="ana_lima_4410")]),
        result("a1", json.dumps({"user_id": "ana_lima_4410", "membership": "gold"})),
        msg("assistant", None, [call("a2", "get_reservation_details", reservation_id="ABC123")]),
        result("a2", json.dumps(reservation)),
        msg(
            "assistant",
            None,
            [
                call(
                    "a3",
                    "update_reservation_baggages",
                    reservation_id="ABC123",
                    total_baggages=2,
                    nonfree_baggages=0,
                    payment_id="gc_1",
                )
            ],
        ),
        result("a3", '{"reservation_id": "ABC123"}'),
        msg("user", "Thanks."),
    ]


def _bags_reference(nonfree: int, total: int = 2) -> list[dict[str, Any]]:
    args = {"reservation_id": "ABC123", "total_baggages": total, "nonfree_baggages": nonfree, "payment_id": "gc_1"}
    return [{"action_id": "b", "requestor": "assistant", "name": "update_reservation_baggages", "arguments": args}]


def test_a_reference_that_charges_bags_the_policy_gives_free_is_the_tasks(tmp_path: Path) -> None:
    plain = {"reason_for_call": "You want to add 2 checked bags to ABC123. You are ana_lima_4410."}
    talk = _bags_talk("I am ana_lima_4410; add 2 bags to ABC123, please.")
    # the gold charges both bags; this policy gives a gold member 3 free per economy passenger
    b = blame_of_messages(
        tmp_path, talk, instructions=plain, actions=_bags_reference(2), policy=BAGS_POLICY.format(gold=3)
    )
    assert b is not None and (b["blame"], b["detector"]) == ("task", "reference_against_policy")
    assert "charges 2 of 2 checked bags" in b["evidence"] and "gold member 3 free per economy" in b["evidence"]
    # the same reference under a policy that gives none free: the charge is the policy's, the agent's fault
    b = blame_of_messages(
        tmp_path, talk, instructions=plain, actions=_bags_reference(2), policy=BAGS_POLICY.format(gold=0)
    )
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "agent_wrong_write")


def test_a_reference_against_the_policy_outranks_an_earlier_user_finding(tmp_path: Path) -> None:
    plain = {"reason_for_call": "You want to add 2 checked bags to ABC123. You are ana_lima_4410."}
    talk = _bags_talk("I am ana_lima_4410. Can I speak to a supervisor?")  # asks_human, before any write
    policy = BAGS_POLICY.format(gold=3)
    # unreachable whatever the user does: the task's
    b = blame_of_messages(tmp_path, talk, instructions=plain, actions=_bags_reference(2), policy=policy)
    assert b is not None and (b["blame"], b["detector"]) == ("task", "reference_against_policy")
    assert [f["detector"] for f in b["findings"]][:2] == ["reference_against_policy", "asks_human"]
    # a reference the policy allows (3 bags, all free): the user's finding, before the agent's wrong write, wins
    b = blame_of_messages(tmp_path, talk, instructions=plain, actions=_bags_reference(0, 3), policy=policy)
    assert b is not None and (b["blame"], b["detector"]) == ("user", "asks_human")


def test_a_request_outside_the_instructions_that_the_agent_makes_is_the_users(tmp_path: Path) -> None:
    address = {"reason_for_call": "You want to update the address of order #W7000001. You are ana_lima_4410."}
    talk = [
        HELLO,
        msg("user", "I am ana_lima_4410. Please update the address of #W7000001."),
        msg("assistant", "I'm sorry, but the address of a shipped order cannot be updated."),
        msg("user", "Then please cancel the order, it is no longer needed."),
        *cancel_done(),
        msg("assistant", "Done."),
    ]
    # the reference expects no write (an empty list): the cancellation is the user's request, not its scenario
    b = blame_of_messages(tmp_path, talk, instructions=address, actions=[])
    assert b is not None and (b["blame"], b["detector"], b["at"], b["confidence"]) == (
        "user",
        "outside_scenario",
        6,
        0.65,
    )
    assert b["quote"] == "Then please cancel the order, it is no longer needed."
    # the agent proposed the cancellation first: still the user's request, less sure
    offered = [
        *talk[:2],
        msg("assistant", "The address cannot be updated; I could cancel the order instead."),
        *talk[3:],
    ]
    b = blame_of_messages(tmp_path, offered, instructions=address, actions=[])
    assert b is not None and (b["blame"], b["detector"], b["confidence"]) == ("user", "outside_scenario", 0.55)
    # the instructions give a cancellation: the request is in the scenario, the write the agent's
    b = blame_of_messages(tmp_path, talk, actions=[])
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "agent_wrong_write")


def test_a_request_standing_in_for_an_expected_write_is_not_outside_the_scenario(tmp_path: Path) -> None:
    exchange = {
        "reason_for_call": "You want to exchange the lamp in order #W7000001 for a new one. You are ana_lima_4410."
    }
    gold = [
        {
            "action_id": "e",
            "requestor": "assistant",
            "name": "exchange_delivered_order_items",
            "arguments": {"order_id": "#W7000001", "item_ids": ["1"], "new_item_ids": ["1"]},
        }
    ]
    talk = [
        HELLO,
        msg("user", "I am ana_lima_4410. I want the lamp in #W7000001 exchanged for a new one."),
        msg("assistant", "An exchange for the same item is not possible; I can process a return."),
        msg("user", "Okay, please return it then."),
        msg("assistant", None, [call("a1", "return_delivered_order_items", order_id="#W7000001", item_ids=["1"])]),
        result("a1", '{"status": "return requested"}'),
        msg("user", "Thanks."),
    ]
    b = blame_of_messages(tmp_path, talk, instructions=exchange, actions=gold)
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "agent_wrong_write")
    # a new booking in place of the expected change (no order or reservation in common), asked for after the
    # agent refused the change: still not the user's departure (held-out tau-bench 4/2, read after its run)
    upgrade = {"reason_for_call": "You want to upgrade reservation ABC123 to economy. You are ana_lima_4410."}
    change = [
        {
            "action_id": "u",
            "requestor": "assistant",
            "name": "update_reservation_flights",
            "arguments": {"reservation_id": "ABC123", "cabin": "economy", "flights": [{"flight_number": "HAT001"}]},
        }
    ]
    rebook = [
        HELLO,
        msg("user", "I am ana_lima_4410. Please upgrade reservation ABC123 to economy."),
        msg("assistant", "Basic economy cannot be modified; you would need a new reservation."),
        msg("user", "Then please book a new reservation in economy for me."),
        msg("assistant", None, [call("a1", "book_reservation", user_id="ana_lima_4410", cabin="economy")]),
        result("a1", '{"reservation_id": "NEW001"}'),
        msg("user", "Thanks."),
    ]
    b = blame_of_messages(tmp_path, rebook, instructions=upgrade, actions=change)
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "agent_wrong_write")


def _booking(flight_type: str) -> dict[str, Any]:
    args = {"user_id": "ana_lima_4410", "flight_type": flight_type, "flights": [{"flight_number": "HAT001"}]}
    return {"action_id": "k", "requestor": "assistant", "name": "book_reservation", "arguments": args}


def test_a_trip_type_the_instructions_do_not_hold_written_by_the_agent_is_the_users(tmp_path: Path) -> None:
    same = {
        "reason_for_call": "You want the same flights as your reservation ABC123 for a friend. You are ana_lima_4410."
    }
    book = [
        msg(
            "assistant",
            None,
            [
                call(
                    "a1",
                    "book_reservation",
                    user_id="ana_lima_4410",
                    flight_type="round_trip",
                    flights=[{"flight_number": "HAT001"}],
                )
            ],
        ),
        result("a1", '{"reservation_id": "NEW001"}'),
        msg("assistant", "Booked."),
    ]
    talk = [
        HELLO,
        msg("user", "I am ana_lima_4410 and need the same flights for a friend."),
        msg("assistant", "Is it one way or round trip?"),  # a question naming both states neither
        msg("user", "It is a round trip."),
        *book,
    ]
    b = blame_of_messages(tmp_path, talk, instructions=same, actions=[_booking("one_way")])
    assert b is not None and (b["blame"], b["detector"], b["at"]) == ("user", "unfounded_fact", 6)
    assert "trip type round_trip" in b["evidence"]
    # the agent said it first: the user repeats it, the write is the agent's
    said = [*talk[:2], msg("assistant", "Your reservation ABC123 is a round trip."), *talk[3:]]
    b = blame_of_messages(tmp_path, said, instructions=same, actions=[_booking("one_way")])
    assert b is not None and (b["blame"], b["detector"]) == ("agent", "agent_wrong_write")


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


@pytest.mark.parametrize(
    ("rule", "check"),
    [("leaving", leaves), ("refusal", refuses), ("mind_change", takes_back)],  # asks_human's pool holds none
)
def test_text_rules_read_a_typographic_apostrophe_as_a_straight_one(rule: str, check: Any) -> None:
    # generated twins of the pool: each phrasing with its apostrophes curled ("can’t", "that’s"), as
    # models and people often write them; the rule must read the twin as it reads the phrasing
    pool = [t for side in ("match", "no_match") for t in PHRASINGS[rule][side] if "'" in t]
    assert pool
    assert [t for t in pool if bool(check(t)) != bool(check(t.replace("'", "’")))] == []


def test_requests_outside_the_instructions_on_phrasings_written_apart() -> None:
    pool = PHRASINGS["outside_request"]
    found = [asks_outside(p["instructions"], p["says"], p["write"]) for p in pool["match"]]
    left = [not asks_outside(p["instructions"], p["says"], p["write"]) for p in pool["no_match"]]
    # written before the rule, but the rule was written with the pool in sight: docs/blame.md
    assert (sum(found), len(found), sum(left), len(left)) == (10, 10, 13, 13)


def test_a_write_kind_is_told_from_the_name_s_words() -> None:
    kinds = {
        t: write_kind(t)
        for t in (
            "cancel_reservation",
            "cancelReservation",
            "book_reservation",
            "update_reservation_baggages",
            "update_reservation_flights",
            "send_certificate",
            "update_address_book",  # an update, not a booking
            "set_return_address",  # no kind: not a return
            "get_reservation_details",  # a read
        )
    }
    assert kinds == {
        "cancel_reservation": "cancel",
        "cancelReservation": "cancel",
        "book_reservation": "book",
        "update_reservation_baggages": "bag",
        "update_reservation_flights": "flight",
        "send_certificate": "certificate",
        "update_address_book": "update",
        "set_return_address": None,
        "get_reservation_details": None,
    }


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
def test_agreement_with_the_hand_labels_dev_held_out_and_both_blind_sets() -> None:
    labels = yaml.safe_load((GOLD / "blame.yaml").read_text(encoding="utf-8"))["conversations"]
    got = _real_blames()
    agree: Counter[tuple[str, bool]] = Counter()
    for key, label in labels.items():
        agree[(label["split"], got.get(key) == label["blame"])] += 1
    # docs/blame.md: dev 18/19 (tuned on), 17/19 since the airline rule reads bags (#33: the gold charges bags the
    # policy gives free; labelled agent); held-out 16/19 on its first run, 15/19 since "100%" is no amount (#57 had
    # agreed for that wrong reason); blind 16/24 on its first run, 21/24 after the rules of issue 45's second pass
    # (a step-limit cut, bags against the policy, a request outside the scenario, a trip type); blind2 26/36 on
    # its first run, on main and on that second pass alike, 27/36 since a new booking in place of a refused change
    # is not outside the scenario (4/2): all seen now
    assert {s: (agree[(s, True)], agree[(s, False)]) for s in ("dev", "held", "blind", "blind2")} == {
        "dev": (17, 2),
        "held": (15, 4),
        "blind": (21, 3),
        "blind2": (27, 9),
    }
    disagreements = {
        split: sorted(
            (k.split("#", 1)[1] for k, v in labels.items() if v["split"] == split and got.get(k) != v["blame"]),
            key=lambda k: tuple(map(int, k.split("/"))),
        )
        for split in ("dev", "held", "blind", "blind2")
    }
    # every one read in docs/blame.md
    assert disagreements == {
        "dev": ["33/0", "83/0"],
        "held": ["25/0", "42/0", "57/0", "86/0"],
        "blind": ["4/1", "19/1", "22/1"],
        "blind2": ["5/2", "6/2", "7/1", "8/3", "9/3", "11/2", "19/2", "19/3", "23/2"],
    }


def test_a_hand_written_bags_note_run_together_is_read_not_raised() -> None:
    # a suite's note, written by hand: pairs without a space between them (it raised ValueError in scoring)
    assert _read_bags("gold: economy=2business=3") == {"gold": {"economy": 2, "business": 3}}
    assert _read_bags("regular: basic_economy=0 economy=1 | gold: economy=3") == {
        "regular": {"basic_economy": 0, "economy": 1},
        "gold": {"economy": 3},
    }
