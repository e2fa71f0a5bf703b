"""The OpenAI-compatible and Anthropic tool loops, through the real SDK
clients over HTTP against scripted fake endpoints on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agents.anthropic_messages import AnthropicAgent
from app.agents.openai_chat import OpenAIChatAgent
from app.agents.retry import EndpointError, EndpointRejected, RetryPolicy
from app.core.records import Trajectory
from app.core.run.router import FaultPlan
from app.core.run.runner import arun_case
from app.core.score.scoring import Scorer
from app.core.suites.suite import Suite, load_suite
from tests.fake_llm import FakeLLM, Turn, serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Q = "Hola, mi RUT es 12345678-9. ¿Cuál es mi saldo?"  # case saldo-001
TWO_AT_ONCE = [  # case saldo-004: two tool calls in the first message
    Turn(calls=[("buscar_cliente", {"rut": "12345678-9"}), ("buscar_pedido", {"numero": "PED-12345"})]),
    Turn(calls=[("ver_saldo", {"id": 8812})]),
    Turn(text="Saldo $142.900; el pedido PED-12345 está despachado."),
]
GOOD = [
    Turn(calls=[("buscar_cliente", {"rut": "12345678-9"})]),
    Turn(calls=[("ver_saldo", {"id": 8812})]),
    Turn(text="Tu saldo es $142.900"),
]


@pytest.fixture(scope="module")
def suite() -> Suite:
    return load_suite(EXAMPLES / "suite_v1.yaml")


@pytest.fixture
def fake() -> Iterator[tuple[FakeLLM, str]]:
    app = FakeLLM()
    with serve(app) as url:
        yield app, url


def _openai(url: str, **kw: object) -> OpenAIChatAgent:
    kw.setdefault("retry", RetryPolicy(attempts=3, base=0.01))
    return OpenAIChatAgent(model="fake-model", base_url=f"{url}/v1", api_key="k", **kw)  # type: ignore[arg-type]


def _run(agent: object, suite: Suite, case_id: str = "saldo-001", faults: FaultPlan | None = None) -> Trajectory:
    case = suite.case(case_id)
    assert case is not None

    async def once() -> Trajectory:
        try:
            return await arun_case(agent, suite, case, faults=faults)  # type: ignore[arg-type]
        finally:
            await agent.aclose()  # type: ignore[attr-defined]  # as the runner does at the end of a run

    return asyncio.run(once())


def test_openai_tool_loop_sends_the_toolset_as_declared_and_records_every_call(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = GOOD
    traj = _run(_openai(url), suite)
    assert [(c.name, c.arguments) for c in traj.calls] == [
        ("buscar_cliente", {"rut": "12345678-9"}),
        ("ver_saldo", {"id": 8812}),
    ]
    assert traj.answer == "Tu saldo es $142.900" and traj.stopped is None
    assert len(app.requests) == 3
    assert app.requests[0]["tools"] == suite.toolset.openai_tools()  # the contract, word for word
    assert app.requests[0]["model"] == "fake-model"
    tool_msgs = [m for m in app.requests[2]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_0_0", "call_1_0"]
    assert json.loads(tool_msgs[1]["content"])["saldo"] == 142900
    score = Scorer(suite).score(traj)
    assert score.passed, score.failures


def test_several_tool_calls_in_one_message(fake, suite) -> None:
    app, url = fake
    q = suite.case("saldo-004").question  # type: ignore[union-attr]
    app.scripts[q] = TWO_AT_ONCE
    traj = _run(_openai(url), suite, "saldo-004")
    assert [c.name for c in traj.calls] == ["buscar_cliente", "buscar_pedido", "ver_saldo"]
    second = app.requests[1]["messages"]
    assistant = next(m for m in second if m["role"] == "assistant")
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["buscar_cliente", "buscar_pedido"]
    assert [m["tool_call_id"] for m in second if m["role"] == "tool"] == ["call_0_0", "call_0_1"]
    assert Scorer(suite).score(traj).passed


def test_arguments_that_are_not_json_are_kept_verbatim_and_fail_the_schema(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = [Turn(calls=[("buscar_cliente", '{"rut": "12345678-9"')]), Turn(text="No pude.")]
    traj = _run(_openai(url), suite)
    call = traj.calls[0]
    assert call.raw_arguments == '{"rut": "12345678-9"' and call.arguments == '{"rut": "12345678-9"'
    assert call.error is not None and call.error.kind == "schema"
    assert traj.to_dict()["calls"][0]["arguments"] == '{"rut": "12345678-9"'
    score = Scorer(suite).score(traj)
    assert "schema" in score.failures and score.calls[0].schema_error is not None


def test_429_then_success_is_retried_and_not_the_agents_failure(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = GOOD
    app.errors[Q] = [429]
    agent = _openai(url)
    traj = _run(agent, suite)
    assert agent.retry.retries == 1 and app.calls == 4
    assert Scorer(suite).score(traj).passed


def test_repeated_500s_become_an_infrastructure_error(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = GOOD
    app.errors[Q] = [500, 500, 500]
    with pytest.raises(EndpointError, match="failed 3 times: InternalServerError 500"):
        _run(_openai(url), suite)
    assert app.calls == 3


def test_a_hang_past_the_timeout_is_retried_then_an_infrastructure_error(fake, suite) -> None:
    app, url = fake
    app.hang_seconds = 3
    app.errors[Q] = ["hang", "hang"]
    with pytest.raises(EndpointError, match="APITimeoutError"):
        _run(_openai(url, timeout=0.3, retry=RetryPolicy(attempts=2, base=0.01)), suite)


def test_a_refused_request_stops_at_once(fake, suite) -> None:
    app, url = fake
    app.errors[Q] = [401]
    with pytest.raises(EndpointRejected, match="401"):
        _run(_openai(url), suite)
    assert app.calls == 1


def test_step_limit_is_recorded(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = [Turn(calls=[("buscar_cliente", {"rut": "12345678-9"})])] * 5
    traj = _run(_openai(url, max_steps=2), suite)
    assert traj.stopped == "step_limit" and len(traj.calls) == 2
    assert traj.to_dict()["stopped"] == "step_limit"


def test_anthropic_tool_use_loop_flags_tool_errors(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = [
        Turn(text="Busco al cliente.", calls=[("buscar_cliente", {"rut": "12345678-9"})]),
        Turn(calls=[("ver_saldo", {"id": 8812})]),
        Turn(calls=[("ver_saldo", {"id": 8812})]),
        Turn(text="Tu saldo es $142.900"),
    ]
    agent = AnthropicAgent(model="claude-fake", base_url=url, api_key="k", retry=RetryPolicy(attempts=2, base=0.01))
    traj = _run(agent, suite, faults=FaultPlan(by_index={1: "http_503"}))
    assert [c.name for c in traj.calls] == ["buscar_cliente", "ver_saldo", "ver_saldo"]
    assert app.requests[0]["tools"] == suite.toolset.anthropic_tools()
    results = [m for m in app.requests[2]["messages"] if m["role"] == "user" and isinstance(m["content"], list)]
    assert [(r["content"][0]["tool_use_id"], r["content"][0]["is_error"]) for r in results] == [
        ("toolu_0_0", False),
        ("toolu_1_0", True),
    ]
    assistant = app.requests[1]["messages"][1]
    assert assistant["content"][0] == {"type": "text", "text": "Busco al cliente."}
    score = Scorer(suite).score(traj)
    assert score.passed and score.outcome is not None and score.outcome.outcome == "recovered"


def _anthropic(url: str, **kw: object) -> AnthropicAgent:
    kw.setdefault("retry", RetryPolicy(attempts=3, base=0.01))
    return AnthropicAgent(model="claude-fake", base_url=url, api_key="k", **kw)  # type: ignore[arg-type]


def test_anthropic_several_tool_uses_in_one_message(fake, suite) -> None:
    app, url = fake
    q = suite.case("saldo-004").question  # type: ignore[union-attr]
    app.scripts[q] = TWO_AT_ONCE
    traj = _run(_anthropic(url), suite, "saldo-004")
    assert [c.name for c in traj.calls] == ["buscar_cliente", "buscar_pedido", "ver_saldo"]
    results = app.requests[1]["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_0_0", "toolu_0_1"]  # one user turn, both results
    assert Scorer(suite).score(traj).passed


@pytest.mark.parametrize("make", [_openai, _anthropic], ids=["openai", "anthropic"])
def test_endpoint_faults_through_both_sdks(fake, suite, make) -> None:
    app, url = fake
    app.scripts[Q] = GOOD
    app.errors[Q] = [429, 503]  # two endpoint faults, then the script: retried, never the agent's failure
    agent = make(url)
    traj = _run(agent, suite)
    assert agent.retry.retries == 2 and Scorer(suite).score(traj).passed
    app.errors[Q] = [500, 500, 500]
    with pytest.raises(EndpointError, match="failed 3 times"):
        _run(make(url), suite)
    app.errors[Q], app.hang_seconds = ["hang", "hang"], 3
    with pytest.raises(EndpointError, match="APITimeoutError"):
        _run(make(url, timeout=0.3, retry=RetryPolicy(attempts=2, base=0.01)), suite)
    app.errors[Q] = [400]  # this case's request (say, too long a context): this case only, not the run
    with pytest.raises(EndpointError, match="refused this case's request"):
        _run(make(url), suite)
    app.errors[Q] = [403]
    with pytest.raises(EndpointRejected, match="403"):
        _run(make(url), suite)


def test_anthropic_step_limit(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = [Turn(calls=[("buscar_cliente", {"rut": "12345678-9"})])] * 5
    traj = _run(_anthropic(url, max_steps=3), suite)
    assert traj.stopped == "step_limit" and len(traj.calls) == 3


def test_a_response_without_choices_is_an_endpoint_fault(fake, suite) -> None:
    app, url = fake
    app.scripts[Q] = GOOD
    app.errors[Q] = ["empty"]  # 200, but no choices (as some proxies answer): retried, not the agent's crash
    agent = _openai(url)
    traj = _run(agent, suite)
    assert agent.retry.retries == 1 and traj.stopped is None and Scorer(suite).score(traj).passed


def test_the_runner_and_run_case_close_the_sdk_connections(fake, suite, tmp_path) -> None:
    """The aiohttp transport's session belongs to one event loop: whoever made the loop closes it."""
    import gc
    import warnings

    from app.core.run.runner import run_case
    from app.runner.session import RunRequest, run_agent
    from app.settings import Settings

    _, url = fake
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        agent = _openai(url)
        case = suite.case("saldo-001")
        assert case is not None
        first, second = run_case(agent, suite, case), run_case(agent, suite, case)  # a new loop each time
        assert first.answer == second.answer and agent._client is None
        out = run_agent(
            Settings(database_url=f"sqlite:///{tmp_path}/r.db"),
            RunRequest(
                agent="openai",
                model="m",
                base_url=f"{url}/v1",
                suite_path=EXAMPLES / "suite_v1.yaml",
                run_name="closed",
                concurrency=4,
            ),
        )
        assert out.summary.stored == len(suite.cases) and out.finished
        gc.collect()
    unclosed = [str(w.message) for w in caught if "nclosed" in str(w.message)]
    assert unclosed == []


def test_chat_answers_are_read_as_the_sdk_read_them() -> None:
    """The OpenAI agent reads the answer bytes itself: a BOM, a lone surrogate escape and text
    parts still read; a tool call without a function name is the endpoint's fault (retried)."""
    from app.agents.openai_chat import first_message, message_text, tool_calls
    from app.agents.retry import MalformedResponse

    body = json.dumps({"choices": [{"message": {"content": "saldo \ud83d", "tool_calls": None}}]})
    assert message_text(first_message(b"\xef\xbb\xbf" + body.encode())["content"]) == "saldo \ud83d"
    parts = {
        "choices": [
            {"message": {"content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}}
        ]
    }
    assert message_text(first_message(json.dumps(parts).encode())["content"]) == "ab"
    call = {"id": "c1", "type": "function", "function": {"name": "ver_saldo", "arguments": {"id": 1}}}
    assert tool_calls({"tool_calls": [call, {"type": "custom", "custom": {}}]}) == [("c1", "ver_saldo", {"id": 1})]
    with pytest.raises(MalformedResponse, match="without a function name"):
        tool_calls({"tool_calls": [{"id": "c2", "function": {"arguments": "{}"}}]})
    for bad in (b"", b"<html>", b'{"choices": []}', b'{"choices": [{"message": null}]}', b"[1]"):
        with pytest.raises(MalformedResponse):
            first_message(bad)


def _spy_posts(agent: OpenAIChatAgent | AnthropicAgent, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Record the keyword arguments of every ``post`` the agent's SDK client makes."""
    sent: list[dict] = []
    make = agent._make_client

    def spying() -> object:
        client = make()
        post = client.post

        async def spy(path: str, **kw: object) -> object:
            sent.append(kw)
            return await post(path, **kw)

        client.post = spy
        return client

    monkeypatch.setattr(agent, "_make_client", spying)
    return sent


def test_a_turn_is_encoded_once_and_its_retries_resend_the_same_request(fake, suite, monkeypatch) -> None:
    """Each turn's body is encoded once (orjson, exactly the JSON the endpoint reads) under one
    idempotency key; a retry after a 429 resends those very bytes and key, the next turn gets a new key."""
    app, url = fake
    app.scripts[Q] = GOOD
    app.errors[Q] = [429]
    agent = _openai(url)
    sent = _spy_posts(agent, monkeypatch)
    assert Scorer(suite).score(_run(agent, suite)).passed
    assert len(sent) == 4 and all(set(kw) == {"cast_to", "content", "options"} for kw in sent)
    first, retried = sent[0], sent[1]
    assert retried["content"] is first["content"] and retried["options"] == first["options"]
    keys = [kw["options"]["idempotency_key"] for kw in sent]
    assert keys[0] == keys[1] and len(set(keys[1:])) == 3 and keys[0].startswith("toollens-")
    assert [json.loads(kw["content"]) for kw in sent] == app.requests  # what went out is what was read


def test_the_anthropic_turn_is_sent_as_encoded_bytes(fake, suite, monkeypatch) -> None:
    app, url = fake
    app.scripts[Q] = GOOD
    agent = AnthropicAgent(model="claude-fake", base_url=url, api_key="k", retry=RetryPolicy(attempts=2, base=0.01))
    sent = _spy_posts(agent, monkeypatch)
    traj = _run(agent, suite)
    assert [c.name for c in traj.calls] == ["buscar_cliente", "ver_saldo"]
    assert [json.loads(kw["content"]) for kw in sent] == app.requests
    assert app.requests[0]["tools"] == suite.toolset.anthropic_tools()


def test_a_body_orjson_refuses_goes_to_the_sdk_encoder() -> None:
    """Integers past 64 bits and non-string keys are JSON the SDK can still write: no crash, its encoder."""
    agent = OpenAIChatAgent(model="m")
    plain = agent.post_args({"model": "m", "messages": [{"role": "user", "content": "ñandú \u2028"}]})
    assert json.loads(plain["content"]) == {"model": "m", "messages": [{"role": "user", "content": "ñandú \u2028"}]}
    for body in ({"model": "m", "seed": 2**70}, {"model": "m", "metadata": {1: "a"}}):
        args = agent.post_args(body)
        assert "content" not in args and args["body"] is body
    keys = {agent.post_args({})["options"]["idempotency_key"] for _ in range(3)}
    assert len(keys) == 3


def test_sdk_clients_share_one_tls_context_built_before_the_run(monkeypatch) -> None:
    """Reading the CA bundle takes 20-30 ms: it happens once per process, in ``preload``, not
    in the run's event loop for every client."""
    import ssl

    import httpx2

    from app.agents import model_agent

    built: list[int] = []
    real = httpx2.create_ssl_context

    def counting(verify: object = True, *args: object, **kwargs: object) -> object:
        if not isinstance(verify, ssl.SSLContext):  # a context handed in is returned as it is
            built.append(1)
        return real(verify, *args, **kwargs)

    monkeypatch.setattr(httpx2, "create_ssl_context", counting)
    model_agent.tls_context.cache_clear()
    try:
        agents = [
            OpenAIChatAgent(model="m", base_url="http://127.0.0.1:9/v1"),
            AnthropicAgent(model="m", base_url="http://127.0.0.1:9"),
        ]
        for agent in agents:
            agent.preload()
        assert built == [1]

        async def in_a_loop() -> None:
            for agent in agents:
                agent.client()
                await agent.aclose()

        asyncio.run(in_a_loop())
        assert built == [1] and model_agent.tls_context() is model_agent.tls_context()
    finally:
        model_agent.tls_context.cache_clear()
