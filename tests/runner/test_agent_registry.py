"""``toollens run --agent``: the registered agents (app.runner.agents) are what its help lists and
what a run is labelled with; any other name is a callable, and a name of neither shape is refused
with the list of what ``--agent`` takes."""

from __future__ import annotations

import pytest

from app.agents import AgentSpecError, SameAgent
from app.commands.run import AGENT_HELP
from app.runner.agents import AGENTS, CALLABLE, agent_kind, agent_label
from app.runner.session import RunRequest, RunSetupError, check_agent


def test_the_help_lists_every_registered_agent_then_the_callable_shapes() -> None:
    assert AGENT_HELP == (
        "openai | anthropic | simulated | module:function (a module in the working directory or on "
        "PYTHONPATH) | path/to/file.py:function (the core's agent protocol)"
    )
    assert all(f"{name} | " in AGENT_HELP for name in AGENTS)


def test_a_name_is_a_registered_agent_or_a_callable() -> None:
    assert agent_kind("simulated") is AGENTS["simulated"] and agent_kind("pkg.mod:agent") is CALLABLE
    assert (agent_label("openai"), agent_label("pkg.mod:agent")) == ("openai", "python pkg.mod:agent")
    assert AGENTS["simulated"].model_label(RunRequest(seed=3)) == "simulated (seed 3)"
    assert AGENTS["openai"].model_label(RunRequest(agent="openai")) == ""


def test_each_agent_checks_its_own_options() -> None:
    with pytest.raises(RunSetupError, match="--agent anthropic needs --model"):
        check_agent(RunRequest(agent="anthropic"))
    with pytest.raises(RunSetupError, match="--sim-rates"):
        check_agent(RunRequest(agent="simulated", sim_rates="confusion=lots"))
    with pytest.raises(
        AgentSpecError,
        match=r"expected one of openai, anthropic, simulated, module:function, "
        r"path/to/file\.py:function",
    ):
        check_agent(RunRequest(agent="gpt-4o"))


def test_a_callable_is_the_same_agent_for_every_case() -> None:
    factory = CALLABLE.build(RunRequest(agent="json:dumps"), None)  # type: ignore[arg-type]  # no suite needed
    assert isinstance(factory, SameAgent) and factory.label == "json:dumps"
