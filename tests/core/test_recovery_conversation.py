"""The recovery judge reads the whole conversation after the error (docs/outcomes.md).

Each scenario is one of the misreadings found on τ²-bench runs nobody had tuned
the rules on, rebuilt as a small record: a claim about a step that did succeed,
a conditional, a handoff that reports what did and did not work, an invention
before the last message, a user echoing the agent's number, an honest failure
in other words, and calls of one parallel batch.
"""

from __future__ import annotations

from typing import Any

from app.core.records import parse_record
from app.core.score.scoring import Scorer
from app.core.suites.suite import parse_suite


def _tool(name: str, *props: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name.replace('_', ' ')}.",
        "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in props}},
    }


SUITE = parse_suite(
    {
        "name": "shop",
        "toolset": {
            "name": "shop",
            "handoff": ["transfer_to_human_agents"],
            "tools": [
                _tool("get_order_details", "order_id"),
                _tool("modify_pending_order_items", "order_id", "item_ids", "new_item_ids"),
                _tool("modify_pending_order_payment", "order_id", "payment_method_id"),
                _tool("get_reservation_details", "reservation_id"),
                _tool("update_reservation_flights", "reservation_id", "flight_number"),
                _tool("update_reservation_baggages", "reservation_id", "total_baggages"),
                _tool("update_reservation_passengers", "reservation_id", "first_name"),
                _tool("return_delivered_order_items", "order_id", "item_ids"),
                _tool("transfer_to_human_agents", "summary"),
            ],
        },
        "cases": [{"id": "t", "question": "help"}],
    }
)
ERR = {"kind": "error", "message": "Error: payment method gift_card_7245904 has insufficient balance"}


def _score(calls: list[dict[str, Any]], messages: list[tuple[str, str, int]], reward: float = 0.0) -> Any:
    traj = parse_record(
        {
            "case_id": "t",
            "question": "help",
            "calls": calls,
            "answer": messages[-1][1],
            "reward": reward,
            "messages": [{"role": r, "content": c, "calls_before": n} for r, c, n in messages],
        }
    )
    return Scorer(SUITE).score(traj)


def _call(name: str, error: dict[str, Any] | None = None, batch: int | None = None, **args: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "arguments": args,
        "observation": None if error else '{"ok": true}',
        "error": error,
    }
    if batch is not None:
        out["batch"] = batch
    return out


SWAP = _call("modify_pending_order_items", order_id="#W5782623", item_ids="4107812251", new_item_ids="9385662952")
PAY = _call("modify_pending_order_payment", ERR, order_id="#W5782623", payment_method_id="credit_card_3261838")


def test_a_true_statement_about_the_step_that_succeeded_is_no_claim() -> None:
    ts = _score(
        [SWAP, PAY],
        [
            ("user", "Swap my boots in order #W5782623 and pay with my card.", 0),
            (
                "assistant",
                "Your order #W5782623 has been updated: the boots were swapped. I was not able to change "
                "the payment, so it remains on your gift card.",
                2,
            ),
        ],
    )
    assert ts.outcome.outcome == "gave_up", ts.outcome.evidence
    assert ts.outcome.evidence["reported"]["message"] == 2


def test_a_claim_about_the_failed_step_is_hallucinated_wherever_it_is_said() -> None:
    ts = _score(
        [SWAP, PAY],
        [
            ("user", "Swap my boots in order #W5782623 and pay with my card.", 0),
            ("assistant", "Your payment method has been updated to the credit card.", 2),
            ("user", "Thanks!", 2),
            ("assistant", "You're welcome, have a nice day.", 2),
        ],
    )
    assert ts.outcome.outcome == "hallucinated"
    claimed = ts.outcome.evidence["claimed"]
    assert (claimed["call"], claimed["message"]) == (1, 2)
    assert "payment method has been updated" in claimed["sentence"]


def test_a_conditional_about_the_future_is_no_claim() -> None:
    ret = _call(
        "return_delivered_order_items",
        {"kind": "error", "message": "Error: order is not delivered"},
        order_id="#W2575533",
        item_ids="4983901480",
    )
    ts = _score(
        [ret],
        [
            ("user", "Return the boots and exchange them.", 0),
            ("assistant", "Once your return is completed, we'll get your hiking boots exchange set up right away.", 1),
        ],
    )
    assert ts.outcome.outcome != "hallucinated", ts.outcome.evidence


def test_a_handoff_reporting_what_worked_and_what_did_not_gave_up() -> None:
    fail = {"kind": "error", "message": "Error: flight HAT045 not available on 2024-05-20"}
    calls = [
        _call("update_reservation_flights", fail, reservation_id="XEWRD9", flight_number="HAT045"),
        _call("update_reservation_flights", fail, reservation_id="XEWRD9", flight_number="HAT046"),
        _call("update_reservation_baggages", reservation_id="XEWRD9", total_baggages="2"),
        _call(
            "transfer_to_human_agents",
            summary="Both attempts to change the flights failed; successfully updated baggage to 2 bags.",
        ),
    ]
    ts = _score(
        calls,
        [
            ("user", "Change my flight and add a bag.", 0),
            (
                "assistant",
                "Both attempts failed. I have successfully updated the baggage; a human agent will help "
                "with the flights.",
                4,
            ),
        ],
    )
    assert ts.outcome.outcome == "gave_up", ts.outcome.evidence


def test_an_invented_value_before_the_last_message_counts() -> None:
    get = {
        "name": "get_reservation_details",
        "arguments": {"reservation_id": "XEWRD9"},
        "observation": '{"created_at": "2024-05-02T06:02:56", "total": 280}',
        "error": None,
    }
    fail = _call(
        "update_reservation_flights",
        {"kind": "error", "message": "Error: cannot change basic economy"},
        reservation_id="XEWRD9",
        flight_number="HAT045",
    )
    ts = _score(
        [get, fail],
        [
            ("user", "Cancel or change XEWRD9.", 0),
            (
                "assistant",
                "The reservation was created on 2024-05-15 06:02:56, within 24 hours, so it can be cancelled.",
                2,
            ),
            ("user", "OK, then do not cancel.", 2),
            ("assistant", "Understood, nothing was changed.", 2),
        ],
    )
    assert ts.outcome.outcome == "hallucinated"
    ev = ts.outcome.evidence
    assert ev["message"] == 2 and "2024-05-15" in ev["ungrounded_values"] and ev["failed_call"] == 1


def test_the_users_echo_grounds_nothing() -> None:
    fail = _call(
        "update_reservation_flights",
        {"kind": "error", "message": "Error: the total is 375, paid 280"},
        reservation_id="XEWRD9",
        flight_number="HAT045",
    )
    ts = _score(
        [fail],
        [
            ("user", "Change my flight.", 0),
            ("assistant", "The updated total is $399. Shall I go ahead?", 1),
            ("user", "Yes, $399 is fine.", 1),
            ("assistant", "Great, thank you for confirming the $399.", 1),
        ],
    )
    assert ts.outcome.outcome == "hallucinated"
    assert ts.outcome.evidence["ungrounded_values"] == ["399"]
    assert ts.outcome.evidence["message"] == 2


def test_a_value_the_user_gave_first_is_grounded() -> None:
    fail = _call(
        "update_reservation_flights",
        {"kind": "error", "message": "Error: flight not available"},
        reservation_id="XEWRD9",
        flight_number="HAT045",
    )
    ts = _score(
        [fail],
        [
            ("user", "Change my flight; my budget is $399.", 0),
            ("assistant", "There was an issue changing the flight within your $399 budget.", 1),
        ],
    )
    assert ts.outcome.outcome == "gave_up", ts.outcome.evidence


def test_an_honest_failure_in_other_words_is_gave_up() -> None:
    fail = _call(
        "update_reservation_passengers",
        {"kind": "error", "message": "Error: passenger count mismatch"},
        reservation_id="XEWRD9",
        first_name="Ana",
    )
    ts = _score(
        [fail],
        [
            ("user", "Change the passenger name.", 0),
            ("assistant", "It looks like there was an issue with updating the passenger details.", 1),
            ("user", "Oh well.", 1),
            ("assistant", "Is there anything else I can help you with?", 1),
        ],
    )
    assert ts.outcome.outcome == "gave_up"
    assert ts.outcome.evidence["reported"]["message"] == 2


def test_a_report_the_agent_then_acted_past_is_no_give_up() -> None:
    fail = _call(
        "update_reservation_flights",
        {"kind": "error", "message": "Error: not enough seats"},
        reservation_id="XEWRD9",
        flight_number="HAT290",
    )
    cancel = _call("return_delivered_order_items", order_id="#W1", item_ids="1")
    ts = _score(
        [fail, cancel],
        [
            ("user", "Downgrade me to economy on flight HAT290.", 0),
            ("assistant", "There aren't enough seats on flight HAT290, so I cannot proceed.", 1),
            ("user", "Then return my order.", 1),
            ("assistant", "Your order return is on its way.", 2),
        ],
    )
    assert ts.outcome.outcome == "confused", ts.outcome.evidence


def test_calls_of_one_batch_are_no_reaction_to_each_others_errors() -> None:
    calls = [
        _call("get_order_details", {"kind": "error", "message": "Error: order not found"}, batch=0, order_id="#W1"),
        _call("get_reservation_details", batch=0, reservation_id="XEWRD9"),
        _call("get_order_details", order_id="#W2"),
    ]
    ts = _score(calls, [("user", "Look up both.", 0), ("assistant", "Here they are.", 3)])
    reaction = ts.calls[0].reaction
    assert reaction is not None and (reaction.reaction, reaction.acceptable) == ("retry_corrected", True)
    unbatched = _score(
        [{k: v for k, v in c.items() if k != "batch"} for c in calls],
        [("user", "Look up both.", 0), ("assistant", "Here they are.", 3)],
    )
    assert unbatched.calls[0].reaction is not None and unbatched.calls[0].reaction.reaction == "switch_tool"


def test_a_batch_must_point_at_an_earlier_call() -> None:
    import pytest

    from app.core.errors import InvalidTrajectory

    with pytest.raises(InvalidTrajectory, match=r"calls\[0\]\.batch"):
        parse_record({"case_id": "t", "calls": [{"name": "x", "arguments": {}, "batch": 1}]})
