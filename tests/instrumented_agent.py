"""One agent, traced by one of the OpenTelemetry instrumentations people run,
for the instrumentation tests: ``python -m tests.instrumented_agent EMITTER
MODEL_URL TRACES_URL`` runs the banking conversation against a scripted
chat-completions server and exports its spans (OTLP/HTTP protobuf) to
``TRACES_URL``. Each emitter runs in its own process: the instrumentations
patch the ``openai`` module, and some set the global tracer provider.

Emitters: ``openai-v2`` (``opentelemetry-instrumentation-openai-v2``),
``openinference`` (``openinference-instrumentation-openai``), ``traceloop``
(``traceloop-sdk``, its ``@tool`` and ``@workflow`` decorators), and the
OpenAI Agents SDK with ``agents-openinference``
(``openinference-instrumentation-openai-agents``) or ``agents-contrib``
(``opentelemetry-instrumentation-openai-agents-v2``, whose module Traceloop's
``opentelemetry-instrumentation-openai-agents`` overwrites: the test installs
it apart and puts it first on ``PYTHONPATH``). A plain loop is wrapped in
one span, as docs/instrumentations.md shows, unless ``--no-wrap`` (then it is
grouped by ``session.id``, which OpenInference's ``using_session`` sets).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

QUESTION = "¿Cuál es el saldo del RUT 12345678-9?"
ANSWER = "Tu saldo es $142.900"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "buscar_cliente",
            "description": "Busca un cliente por RUT.",
            "parameters": {"type": "object", "properties": {"rut": {"type": "string"}}, "required": ["rut"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "ver_saldo",
            "description": "Saldo por id interno.",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        },
    },
]


def buscar_cliente(rut: str) -> str:
    return json.dumps({"id": 8812})


def ver_saldo(id: Any) -> str:
    if not isinstance(id, int):
        return "Error: id must be an integer"
    return json.dumps({"saldo": 142900})


def provider(traces_url: str) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=traces_url, timeout=10)))
    return tracer_provider


def chat_loop(model_url: str, tools: dict[str, Callable[..., str]]) -> str:
    """The plain agent loop most production agents are: chat completions until no tool call."""
    from openai import OpenAI

    client = OpenAI(base_url=model_url, api_key="test", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    for _ in range(8):
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            result = tools[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return ""


def plain(emitter: str, model_url: str, traces_url: str, wrap: bool) -> None:
    tracer_provider = provider(traces_url)
    if emitter == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=tracer_provider)
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        OpenInference().instrument(tracer_provider=tracer_provider)
    tools = {"buscar_cliente": buscar_cliente, "ver_saldo": ver_saldo}
    if wrap:
        with tracer_provider.get_tracer("agent").start_as_current_span(
            "invoke_agent banca", attributes={"gen_ai.operation.name": "invoke_agent"}
        ):
            chat_loop(model_url, tools)
    else:
        from openinference.instrumentation import using_session

        with using_session("conversacion-1"):
            chat_loop(model_url, tools)
    tracer_provider.shutdown()


def traceloop(model_url: str, traces_url: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from traceloop.sdk import Instruments, Traceloop
    from traceloop.sdk.decorators import tool, workflow

    # only the openai instrumentation: by default it imports each of its ~40 (the Agents SDK's too: seconds)
    Traceloop.init(
        app_name="banca",
        exporter=OTLPSpanExporter(endpoint=traces_url, timeout=10),
        disable_batch=True,
        telemetry_enabled=False,
        instruments={Instruments.OPENAI},
    )
    tools = {
        "buscar_cliente": tool(name="buscar_cliente")(buscar_cliente),
        "ver_saldo": tool(name="ver_saldo")(ver_saldo),
    }

    @workflow(name="banca")
    def agent() -> str:
        return chat_loop(model_url, tools)

    agent()


def agents_sdk(model_url: str, traces_url: str, contrib: bool) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors
    from openai import AsyncOpenAI

    set_trace_processors([])  # not to the OpenAI platform: only the instrumentation's processor
    tracer_provider = provider(traces_url)
    if contrib:  # opentelemetry-instrumentation-openai-agents-v2 (its module name is Traceloop's too)
        from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor as Contrib

        Contrib().instrument(tracer_provider=tracer_provider)
    else:
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        OpenAIAgentsInstrumentor().instrument(tracer_provider=tracer_provider)

    @function_tool(name_override="buscar_cliente")
    def buscar(rut: str) -> str:
        """Busca un cliente por RUT."""
        return buscar_cliente(rut)

    @function_tool(name_override="ver_saldo", strict_mode=False)
    def saldo(id: Any) -> str:
        """Saldo por id interno."""
        return ver_saldo(id)

    model = OpenAIChatCompletionsModel(
        model="gpt-4o", openai_client=AsyncOpenAI(base_url=model_url, api_key="test", max_retries=0)
    )
    agent = Agent(name="banca", instructions="Responde en español.", model=model, tools=[buscar, saldo])
    Runner.run_sync(agent, QUESTION)
    tracer_provider.shutdown()


def main(argv: list[str]) -> None:
    emitter, model_url, traces_url = argv[:3]
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    if emitter in ("openai-v2", "openinference"):
        plain(emitter, model_url, traces_url, wrap="--no-wrap" not in argv)
    elif emitter == "traceloop":
        traceloop(model_url, traces_url)
    elif emitter in ("agents-openinference", "agents-contrib"):
        agents_sdk(model_url, traces_url, contrib=emitter == "agents-contrib")
    else:
        raise SystemExit(f"unknown emitter {emitter!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
