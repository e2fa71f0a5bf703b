"""The agents ``toollens run --agent`` names: a registry, name → how to check the
options it needs and build its per-case factory. Any other name is a callable,
``module:function`` or ``path/to/file.py:function`` (the core's agent protocol).

Light on purpose: ``toollens run``'s help is built from it at start-up, so the
agents' modules (and their SDKs) are imported only when one is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.agents.simulated import SimRates
    from app.core.suites.suite import Suite
    from app.runner.execute import AgentFactory
    from app.runner.request import RunRequest


@dataclass(frozen=True)
class AgentKind:
    """What ``--agent NAME`` runs. ``check`` refuses bad options before anything
    is stored; ``build`` makes the factory; ``model_label`` names the model of a
    run without ``--model``."""

    name: str
    check: Callable[[RunRequest], None]
    build: Callable[[RunRequest, Suite], AgentFactory]
    model_label: Callable[[RunRequest], str] = lambda _request: ""


def _sim_rates(request: RunRequest) -> SimRates:
    from app.agents.simulated import SimRates
    from app.runner.request import RunSetupError

    try:
        return SimRates.parse(request.sim_rates)
    except ValueError as exc:
        raise RunSetupError(f"--sim-rates: {exc}") from None


def _check_simulated(request: RunRequest) -> None:
    _sim_rates(request)


def _simulated(request: RunRequest, suite: Suite) -> AgentFactory:
    from app.agents.simulated import SimulatedAgent

    return SimulatedAgent(suite.toolset, rates=_sim_rates(request), seed=request.seed)


def _needs_model(request: RunRequest) -> None:
    from app.runner.request import RunSetupError

    if not request.model:
        raise RunSetupError(f"--agent {request.agent} needs --model")


def _endpoint(request: RunRequest, suite: Suite) -> AgentFactory:
    """An adapter of a model endpoint: the same agent for every case run."""
    from app.agents import SameAgent
    from app.agents.anthropic_messages import AnthropicAgent
    from app.agents.openai_chat import OpenAIChatAgent
    from app.agents.retry import RetryPolicy

    _needs_model(request)
    cls = OpenAIChatAgent if request.agent == "openai" else AnthropicAgent
    agent = cls(
        model=request.model,
        base_url=request.base_url,
        system=request.system,
        max_steps=request.max_steps,
        temperature=request.temperature,
        timeout=request.timeout,
        retry=RetryPolicy(attempts=request.attempts, base=request.backoff),
    )
    agent.preload()  # the SDK is imported before the clock starts
    return SameAgent(agent, request.agent)


AGENTS: dict[str, AgentKind] = {
    k.name: k
    for k in (
        AgentKind("openai", _needs_model, _endpoint),
        AgentKind("anthropic", _needs_model, _endpoint),
        AgentKind("simulated", _check_simulated, _simulated, lambda request: f"simulated (seed {request.seed})"),
    )
}

CALLABLES: dict[str, str] = {  # the shapes of any other --agent, and what they name
    "module:function": "a module in the working directory or on PYTHONPATH",
    "path/to/file.py:function": "the core's agent protocol",
}


def _load(request: RunRequest) -> None:
    from app.agents import load_callable

    load_callable(request.agent, expected=[*AGENTS, *CALLABLES])


def _callable(request: RunRequest, suite: Suite) -> AgentFactory:
    from app.agents import SameAgent, load_callable

    return SameAgent(load_callable(request.agent, expected=[*AGENTS, *CALLABLES]), request.agent)


CALLABLE = AgentKind("callable", _load, _callable)


def agent_kind(name: str) -> AgentKind:
    """The registered agent ``name``, else the callable it names."""
    return AGENTS.get(name, CALLABLE)


def agent_label(name: str) -> str:
    """How a run names its agent: the registered name, or ``python SPEC``."""
    return name if name in AGENTS else f"python {name}"


def agent_help() -> str:
    """``--agent``'s help."""
    return " | ".join([*AGENTS, *(f"{shape} ({what})" for shape, what in CALLABLES.items())])
