"""Usage recorded by the runner: the SDK answers' token counts and the wall
clock of every model request (OpenAI and Anthropic loops against the fake
endpoints on loopback), the tool's wall time on every call, and an injected
delay, slept and recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agents.anthropic_messages import AnthropicAgent
from app.agents.openai_chat import OpenAIChatAgent
from app.agents.retry import RetryPolicy
from app.core.records import Trajectory
from app.core.run.router import FaultPlan, FaultSpecError, MockRouter, Toolbox
from app.core.run.runner import arun_case, run_case
from app.core.suites.suite import Suite, load_suite
from app.core.usage import ModelCall
from tests.fake_llm import FakeLLM, Turn, serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Q = "Hola, mi RUT es 12345678-9. ¿Cuál es mi saldo?"  # case saldo-001
SCRIPT = [
    Turn(calls=[("buscar_cliente", {"rut": "12345678-9"})], input_tokens=300, output_tokens=12),
    Turn(calls=[("ver_saldo", {"id": 8812})], input_tokens=420, output_tokens=9, cached_tokens=256),
    Turn(text="Tu saldo es $142.900", input_tokens=530, output_tokens=14, cached_tokens=384),
]


@pytest.fixture(scope="module")
def suite() -> Suite:
    return load_suite(EXAMPLES / "suite_v1.yaml")


@pytest.fixture
def fake() -> Iterator[tuple[FakeLLM, str]]:
    app = FakeLLM(delay=0.03)  # every model request takes at least 30 ms
    app.scripts[Q] = SCRIPT
    with serve(app) as url:
        yield app, url


def _run(agent: OpenAIChatAgent | AnthropicAgent, suite: Suite, faults: FaultPlan | None = None) -> Trajectory:
    case = suite.case("saldo-001")
    assert case is not None

    async def once() -> Trajectory:
        try:
            return await arun_case(agent, suite, case, faults=faults)
        finally:
            await agent.aclose()

    return asyncio.run(once())


def _tokens(traj: Trajectory) -> list[tuple[str | None, int | None, int | None, int | None]]:
    return [(m.model, m.input_tokens, m.output_tokens, m.cached_tokens) for m in traj.model_calls or []]


def test_the_openai_loop_records_every_request(fake, suite) -> None:
    _, url = fake
    agent = OpenAIChatAgent(
        model="fake-model", base_url=f"{url}/v1", api_key="k", retry=RetryPolicy(attempts=2, base=0.01)
    )
    traj = _run(agent, suite)
    assert _tokens(traj) == [("fake-model", 300, 12, 0), ("fake-model", 420, 9, 256), ("fake-model", 530, 14, 384)]
    assert all(m.latency_ms is not None and 30 <= m.latency_ms < 5000 for m in traj.model_calls or [])
    assert all(c.latency_ms is not None and 0 <= c.latency_ms < 1000 for c in traj.calls)
    assert traj.to_dict()["model_calls"][0] == {
        "model": "fake-model",
        "input_tokens": 300,
        "output_tokens": 12,
        "cached_tokens": 0,
        "latency_ms": traj.model_calls[0].latency_ms,
    }


def test_the_anthropic_loop_counts_cache_reads_into_the_prompt(fake, suite) -> None:
    _, url = fake
    agent = AnthropicAgent(model="claude-fake", base_url=url, api_key="k", retry=RetryPolicy(attempts=2, base=0.01))
    traj = _run(agent, suite)
    # the fake answers input_tokens 420 - 256 = 164 and cache_read_input_tokens 256: the record's input is 420
    assert _tokens(traj) == [("claude-fake", 300, 12, 0), ("claude-fake", 420, 9, 256), ("claude-fake", 530, 14, 384)]
    assert all(m.latency_ms is not None and m.latency_ms >= 30 for m in traj.model_calls or [])


def test_an_injected_delay_is_slept_and_recorded_in_the_async_loop(fake, suite) -> None:
    _, url = fake
    agent = OpenAIChatAgent(
        model="fake-model", base_url=f"{url}/v1", api_key="k", retry=RetryPolicy(attempts=2, base=0.01)
    )
    traj = _run(agent, suite, FaultPlan.parse("index:0=timeout,delay:80"))
    first = traj.calls[0]
    assert first.error is not None and first.error.injected and first.error.delay_ms == 80.0
    assert first.latency_ms is not None and 80 <= first.latency_ms < 1000
    assert traj.calls[1].error is None and (traj.calls[1].latency_ms or 0) < 80


def test_a_callable_agent_gets_tool_latency_and_may_report_its_own_requests(suite) -> None:
    case = suite.case("saldo-001")
    assert case is not None

    def agent(question: str, toolbox: Toolbox) -> str:
        toolbox.record_model_call(ModelCall(model="gpt-4o", input_tokens=10, output_tokens=2))
        toolbox.call("buscar_cliente", {"rut": "12345678-9"})
        return "?"

    traj = run_case(agent, suite, case, faults=FaultPlan.parse("index:0=http_503,delay:40"))
    assert traj.model_calls == [ModelCall(model="gpt-4o", input_tokens=10, output_tokens=2)]
    assert traj.calls[0].error is not None and traj.calls[0].error.delay_ms == 40.0
    assert 40 <= (traj.calls[0].latency_ms or 0) < 1000
    with pytest.raises(ValueError, match=r"model_calls\[0\].input_tokens: must be an integer"):
        Toolbox(MockRouter(suite.toolset)).record_model_call(ModelCall(input_tokens=-5))
    plain = run_case(lambda q, tb: "nada", suite, case)
    assert plain.model_calls is None and "model_calls" not in plain.to_dict()  # nothing reported: nothing recorded


def test_a_delay_must_be_a_sane_number_of_milliseconds() -> None:
    assert FaultPlan.parse("p:0.5,delay:250").delay_ms == 250.0
    with pytest.raises(FaultSpecError):
        FaultPlan.parse("delay:-1")
    with pytest.raises(FaultSpecError):
        FaultPlan.parse("delay:soon")
