"""Conversations: the simulated user's protocol, what an agent's message asks
for, and the checks that catch a user model's own mistakes (``user_error``).

A simulated user reads its spec (instruction, hidden facts) and the
transcript so far and says the next user message. Its mistakes are not the
agent's: ``check_user`` finds the cheap, deterministic ones after a
conversation, and the record carries them as ``user_error``
(``[{"kind", "detail"}]``) instead of counting them against the agent.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, Protocol

from app.core.records import Message
from app.core.suites.suite import UserSpec

USER_ERROR_KINDS = ("leaked_instruction", "stopped_early", "contradicted_known")
LEAK_WORDS = 8  # this many consecutive words of the instruction in a user message: a leak


class SimulatedUser(Protocol):
    """Says the next user message, sync or async, from the spec and the
    transcript so far (user and assistant messages, in order)."""

    def reply(self, spec: UserSpec, transcript: Sequence[Message], /) -> str | Awaitable[str]: ...


_GENERIC = frozenset(
    {
        "numero",
        "number",
        "num",
        "nro",
        "id",
        "the",
        "del",
        "de",
        "el",
        "la",
        "los",
        "las",
        "your",
        "tu",
        "su",
        "code",
        "codigo",
    }
)
# what people call a fact besides its name (folded, lower case)
SYNONYMS: dict[str, tuple[str, ...]] = {
    "rut": ("rut", "run", "cedula", "identificacion"),
    "email": ("email", "correo", "mail"),
    "telefono": ("telefono", "phone", "celular"),
    "phone": ("telefono", "phone"),
    "reservation": ("reservation", "reserva", "booking"),
    "reserva": ("reservation", "reserva", "booking"),
    "pedido": ("pedido", "order", "orden"),
    "order": ("pedido", "order", "orden"),
    "nombre": ("nombre", "name"),
    "name": ("nombre", "name"),
}
_ASKING = (
    "?",
    "necesito",
    "indica",
    "dime",
    "proporciona",
    "entrega",
    "ingresa",
    "please provide",
    "could you",
    "can you",
    "i need",
    "tell me",
    "what is",
)
_CONFIRM = (
    "confirm",
    "procedo",
    "proceed",
    "autoriza",
    "de acuerdo",
    "shall i",
    "should i",
    "quieres que",
    "deseas que",
)


def fold(text: str) -> str:
    """Lower case without accents: how facts and requests are compared."""
    return unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", fold(text))


def fact_words(fact: str) -> frozenset[str]:
    """The words that name a fact: its name's words (``numero_pedido`` ->
    ``pedido``; generic ones such as "numero" left out) and their synonyms."""
    own = [w for w in _words(fact) if w not in _GENERIC] or _words(fact)
    return frozenset(s for w in own for s in SYNONYMS.get(w, (w,)))


def asks(text: str) -> bool:
    folded = fold(text)
    return any(cue in folded for cue in _ASKING)


def asked_for(fact: str, text: str) -> bool:
    """Whether an agent's message asks for the fact: it asks something and names the fact."""
    return asks(text) and bool(fact_words(fact) & set(_words(text)))


def asks_to_confirm(text: str) -> bool:
    folded = fold(text)
    return any(cue in folded for cue in _CONFIRM)


def _plain(value: Any) -> str:
    """A value as compared in text: folded, without dots, spaces or thousands separators."""
    return re.sub(r"[\s.,]", "", fold(str(value)))


def says_value(value: Any, text: str) -> bool:
    """Whether the text states the value ("12.345.678-9" says "12345678-9")."""
    plain = _plain(value)
    return bool(plain) and plain in _plain(text)


def _shape(value: Any) -> re.Pattern[str] | None:
    """A pattern for values written like this one (digits as digits, letters
    as letters, separators kept); None for values too short to tell apart."""
    text = str(value).strip()
    if len(text) < 4 or not any(ch.isdigit() for ch in text):
        return None
    parts = [r"\d" if ch.isdigit() else "[A-Za-z]" if ch.isalpha() else re.escape(ch) for ch in text]
    return re.compile(r"(?<![\w-])" + "".join(parts) + r"(?![\w-])")


def misstated(value: Any, text: str, others: Iterable[Any] = ()) -> list[str]:
    """The values ``text`` writes like ``value`` (digits as digits, letters as letters) that
    are neither it nor one of ``others`` (the other facts' values)."""
    shape = _shape(value)
    if shape is None:
        return []
    other = {_plain(v) for v in others}
    return [found for found in shape.findall(text) if _plain(found) != _plain(value) and _plain(found) not in other]


def check_user(spec: UserSpec, messages: Sequence[Message]) -> list[dict[str, str]]:
    """The user model's mistakes in a conversation: the user's replies (every
    user message after the first, which the suite wrote) checked against the
    instruction, the hidden facts and the agent's messages before each."""
    errors: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: str, detail: str) -> None:
        if (kind, detail) not in seen:
            seen.add((kind, detail))
            errors.append({"kind": kind, "detail": detail[:500]})

    instruction = _words(spec.instruction)
    spans = {" ".join(instruction[i : i + LEAK_WORDS]) for i in range(len(instruction) - LEAK_WORDS + 1)}
    known = {k: str(v) for k, v in spec.known.items()}
    said: set[str] = set()
    asked: set[str] = set()
    calls_so_far = 0
    for i, message in enumerate(messages):
        if message.role == "assistant":
            asked |= {k for k in known if asked_for(k, message.content)}
            calls_so_far = message.calls_before
            continue
        if i == 0:
            said |= {k for k, v in known.items() if says_value(v, message.content)}
            continue
        words = _words(message.content)
        if any(" ".join(words[j : j + LEAK_WORDS]) in spans for j in range(len(words) - LEAK_WORDS + 1)):
            add("leaked_instruction", f"message {i + 1} copies {LEAK_WORDS}+ words of the instruction")
        for fact, value in known.items():
            if says_value(value, message.content) and fact not in asked and fact not in said:
                add("leaked_instruction", f"message {i + 1} gives {fact} before the agent asked for it")
            said |= {fact} if says_value(value, message.content) else set()
            for found in misstated(value, message.content, [v for k, v in known.items() if k != fact]):
                add("contradicted_known", f"message {i + 1} says {found!r} for {fact}, known as {value!r}")
        if spec.stop in message.content:
            prev = messages[i - 1] if messages[i - 1].role == "assistant" else None
            pending = prev is not None and (
                asks_to_confirm(prev.content) or any(asked_for(k, prev.content) for k in known)
            )
            if pending or (calls_so_far == 0 and (prev is None or not prev.content.strip())):
                add(
                    "stopped_early",
                    f"message {i + 1} ends the conversation while the agent "
                    + ("waits for the user's answer" if pending else "has neither called a tool nor answered"),
                )
    return errors
