"""A stand-in for your agent: `toollens run SUITE --agent examples.my_agent:agent`.

An agent is any callable ``agent(question, toolbox) -> answer`` (sync or
async). ``toolbox.openai_tools`` / ``toolbox.anthropic_tools`` are the tools
exactly as declared; ``toolbox.call(name, arguments)`` runs one (mocked) and
returns its observation. In a conversation (a multi-turn case) it is called
once per user message, the conversation so far on ``toolbox.messages``
(``[{role, content}]``). This one is a few rules, no model: it answers balance
questions of the example suite (`examples/suite_v2.yaml`) and gives up on the
rest. Replace its body with your agent's loop.
"""

from __future__ import annotations

import json
import re
from typing import Any

RUT = re.compile(r"\b\d{7,8}-[\dkK]\b")


def agent(question: str, toolbox: Any) -> str:
    rut = RUT.search(question)
    if rut is None or "saldo" not in question.lower():
        return "No logré resolverlo: te derivo con un ejecutivo."
    cliente = toolbox.call("buscar_cliente", {"rut": rut.group()})
    if toolbox.last_failed:
        cliente = toolbox.call("buscar_cliente", {"rut": rut.group()})  # one retry after a tool error
    if toolbox.last_failed:
        return "No logré consultar tus datos ahora: te derivo con un ejecutivo."
    saldo = toolbox.call("ver_saldo", {"id": json.loads(cliente)["id"]})
    if toolbox.last_failed:
        saldo = toolbox.call("ver_saldo", {"id": json.loads(cliente)["id"]})
    if toolbox.last_failed:
        return "No logré consultar tu saldo ahora: te derivo con un ejecutivo."
    return f"Tu saldo es ${json.loads(saldo)['saldo']:,}".replace(",", ".")
