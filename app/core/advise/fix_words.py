"""The words ``toollens fix`` writes with, drawn from the toolset itself.

- ``spelled``: a tool name's words as the toolset writes them (``nota
  credito`` is "nota de crédito" where a description says so: accents kept;
  a Spanish word no text writes gets its accent all the same, ``accented``:
  "devolución");
- ``gerund``: an English verb of a tool name as "-ing" ("cancelling");
- ``effect``: whether a tool reads or writes, from the verb of its name (or
  its description's first word);
- ``meaning_match``: the declared tool an invented name means (``get_balance``
  is ``ver_saldo``: the name's words against the declared names and
  descriptions, through a short English/Spanish glossary), or none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal

from app.core.language import Language, detect_language
from app.core.language import fold as _fold
from app.core.suites.tools import Toolset, ToolSpec

Effect = Literal["reads", "writes", ""]

_SMALL = r"(?:de|del|la|el|los|las|un|una|of|the|a|an)"
_LINK = rf"(?:(?:\s+{_SMALL}){{0,3}}\s+|[_\-])"
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)

READ_VERBS = frozenset(
    {
        "buscar",
        "ver",
        "obtener",
        "consultar",
        "listar",
        "verificar",
        "mostrar",
        "leer",
        "revisar",
        "comprobar",
        "get",
        "list",
        "search",
        "find",
        "show",
        "lookup",
        "look",
        "read",
        "check",
        "fetch",
        "view",
        "query",
        "describe",
        "status",
        "log",
        "diff",
        "verify",
        "retrieve",
        "lista",
        "muestra",
        "busca",
        "obtiene",
        "devuelve",
        "consulta",
        "verifica",
        "comprueba",
        "shows",
        "gets",
        "returns",
        "lists",
        "finds",
        "searches",
        "fetches",
    }
)
WRITE_VERBS = frozenset(
    {
        "emitir",
        "crear",
        "iniciar",
        "cancelar",
        "anular",
        "eliminar",
        "borrar",
        "actualizar",
        "modificar",
        "registrar",
        "enviar",
        "pagar",
        "reservar",
        "agregar",
        "anadir",
        "generar",
        "transferir",
        "cambiar",
        "aplicar",
        "cerrar",
        "abrir",
        "create",
        "update",
        "delete",
        "remove",
        "send",
        "cancel",
        "issue",
        "start",
        "book",
        "pay",
        "add",
        "refund",
        "write",
        "set",
        "post",
        "commit",
        "reset",
        "checkout",
        "init",
        "apply",
        "close",
        "open",
        "transfer",
        "make",
        "submit",
        "record",
        "records",
        "emite",
        "crea",
        "inicia",
        "cancela",
        "anula",
        "elimina",
        "borra",
        "actualiza",
        "modifica",
        "registra",
        "envia",
        "paga",
        "reserva",
        "agrega",
        "genera",
        "creates",
        "updates",
        "deletes",
        "sends",
        "cancels",
        "issues",
        "starts",
        "books",
        "adds",
        "writes",
    }
)

# English and Spanish words of the same thing: an invented name in one language, a toolset in the other.
_GLOSSARY: tuple[frozenset[str], ...] = tuple(
    frozenset(g)
    for g in (
        {"order", "orders", "pedido", "pedidos", "orden"},
        {"customer", "client", "cliente", "clientes", "user"},
        {"product", "products", "item", "producto", "productos", "articulo"},
        {"balance", "saldo"},
        {"account", "cuenta"},
        {"refund", "return", "devolucion", "reembolso", "devolver"},
        {"credit", "credito"},
        {"note", "nota"},
        {"purchase", "compra", "buy", "comprar"},
        {"invoice", "factura"},
        {"payment", "pago", "pay", "pagar"},
        {"price", "precio"},
        {"stock", "inventory", "inventario"},
        {"flight", "vuelo"},
        {"booking", "reservation", "reserva"},
        {
            "search",
            "find",
            "lookup",
            "look",
            "get",
            "fetch",
            "show",
            "view",
            "read",
            "query",
            "check",
            "retrieve",
            "buscar",
            "obtener",
            "ver",
            "consultar",
            "mostrar",
            "leer",
            "revisar",
        },
        {"list", "listar"},
        {"verify", "check", "verificar", "comprobar"},
        {"cancel", "cancelar", "anular"},
        {"create", "crear", "issue", "emitir", "generate", "generar"},
        {"start", "begin", "iniciar", "initiate"},
        {"delete", "remove", "eliminar", "borrar"},
        {"update", "modify", "actualizar", "modificar", "change", "cambiar"},
        {"send", "enviar"},
    )
)


def description_texts(toolset: Toolset) -> list[str]:
    """Every description of the toolset: its tools' and their arguments'."""
    out = [t.description for t in toolset.tools]
    for t in toolset.tools:
        props = t.parameters.get("properties")
        for prop in props.values() if isinstance(props, dict) else ():
            if isinstance(prop, dict) and isinstance(prop.get("description"), str):
                out.append(prop["description"])
    return out


@lru_cache(maxsize=8192)
def fold(text: str) -> str:
    """``language.fold``, kept for the words and texts of the toolsets used lately: the proposals
    fold the same descriptions and names once per pair of tools (tens of thousands of times for a
    run page's rewrites)."""
    return _fold(text)


@lru_cache(maxsize=64)
def texts_language(texts: tuple[str, ...]) -> Language:
    """``language.detect_language`` of these texts, kept for the toolsets used lately."""
    return detect_language(texts)


@lru_cache(maxsize=1024)
def _folded(text: str) -> str:
    """``fold`` character by character, so positions match the original text."""
    return "".join((fold(c) or " ")[0] for c in text)


# Spanish words of tool names whose accent a name cannot write (beyond "-ción"/"-sión"), for a toolset
# whose texts never write the word: "iniciar_devolucion" is "iniciar devolución".
_ACCENTED = {
    fold(w): w
    for w in (
        "crédito",
        "débito",
        "número",
        "código",
        "teléfono",
        "envío",
        "artículo",
        "póliza",
        "cupón",
        "último",
        "últimos",
        "dígitos",
        "página",
        "catálogo",
        "categoría",
        "límite",
        "depósito",
        "menú",
        "razón",
        "dirección",
        "período",
        "médico",
        "mínimo",
        "máximo",
        "público",
        "método",
        "guía",
        "día",
        "días",
        "más",
        "también",
        "reseña",
        "contraseña",
        "año",
    )
}


def accented(word: str) -> str:
    """A Spanish word written without its accent, with it (``devolucion`` → ``devolución``)."""
    low = word.lower()
    if fold(low) in _ACCENTED and low == fold(low):
        return _ACCENTED[low]
    if len(low) > 4 and re.fullmatch(r"[a-zñ]+(c|s)ion", low):
        return low[:-3] + "ión"
    return word


def spelled_word(word: str, texts: Iterable[str], *, spanish: bool = False) -> str:
    """A word as the texts write it (``credito`` → ``crédito``, ``rut`` → ``RUT``), else as given
    (with its accent, for a Spanish toolset: ``devolucion`` → ``devolución``)."""
    target = fold(word)
    written = False
    for text in texts:
        for w in _WORD.findall(text):
            if fold(w) == target and w != word:
                return str(w) if w.isupper() and len(w) > 1 else str(w).lower()
            written = written or w == word
    return accented(word) if spanish and not written else word


def spelled(words: list[str], toolset: Toolset) -> str:
    """A name's words as the toolset writes them: the object (the words after
    the verb) as a description phrases it, small words and accents kept
    (``["emitir", "nota", "credito"]`` → "emitir nota de crédito"), else word by word."""
    texts = description_texts(toolset)
    if not words:
        return ""
    head, rest = (words[0], words[1:]) if len(words) > 1 else ("", words)
    phrase = ""
    pattern = re.compile(r"\b" + _LINK.join(re.escape(fold(w)) for w in rest) + r"\b")
    for text in texts:
        found = pattern.search(_folded(text))
        if found:
            phrase = text[found.start() : found.end()]
            phrase = phrase if phrase.isupper() else phrase.lower()
            break
    spanish = texts_language(tuple(texts)) == "es"
    if not phrase:  # word by word; Spanish links two nouns with "de" ("estado de empleado")
        link = " de " if len(rest) > 1 and spanish else " "
        phrase = link.join(spelled_word(w, texts, spanish=spanish) for w in rest)
    return f"{spelled_word(head, texts, spanish=spanish)} {phrase}".strip()


_EN_VERBS = frozenset(
    {
        "find",
        "get",
        "list",
        "search",
        "show",
        "read",
        "check",
        "fetch",
        "view",
        "query",
        "verify",
        "retrieve",
        "create",
        "update",
        "delete",
        "remove",
        "send",
        "cancel",
        "issue",
        "start",
        "book",
        "pay",
        "add",
        "refund",
        "write",
        "set",
        "post",
        "commit",
        "reset",
        "apply",
        "close",
        "open",
        "transfer",
        "make",
        "submit",
        "record",
        "describe",
        "track",
        "void",
        "modify",
        "change",
        "edit",
        "upload",
        "download",
        "run",
        "stop",
        "move",
        "copy",
    }
)
_DOUBLED = frozenset({"get", "set", "put", "run", "stop", "cancel", "commit", "submit", "transfer"})


def gerund(verb: str) -> str:
    """An English verb of a tool name as "-ing" (``cancel`` → ``cancelling``, ``update`` →
    ``updating``, ``lookup`` → ``looking up``); any other word (``log`` in ``git_log``) as given."""
    w = verb.lower()
    if w == "lookup":
        return "looking up"
    if w not in _EN_VERBS:
        return verb
    if w in _DOUBLED:
        return w + w[-1] + "ing"
    if w.endswith("e") and not w.endswith("ee"):
        return w[:-1] + "ing"
    return w + "ing"


def _split(name: str) -> list[str]:
    return [fold(w) for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if w]


def effect(tool: ToolSpec, toolset: Toolset | None = None) -> Effect:
    """Whether the tool reads or writes: the verb of its name (less a prefix
    every tool of the toolset shares, ``git_``), else its description's first word."""
    name = _split(tool.name)
    if toolset is not None and len(toolset) > 2:
        common = set.intersection(*(set(_split(t.name)) for t in toolset.tools))
        name = [w for w in name if w not in common] or name
    first = _WORD.findall(tool.description)
    for verb in (name[0] if name else "", fold(first[0]) if first else ""):
        if verb in WRITE_VERBS:
            return "writes"
        if verb in READ_VERBS:
            return "reads"
    return ""


def _senses(word: str) -> set[str]:
    w = fold(word)
    out = {w}
    for group in _GLOSSARY:
        if w in group:
            out |= group
    return out


def _stems(words: Iterable[str]) -> set[str]:
    return {w[:5] for w in words if len(w) > 2}


def meaning_match(name: str, toolset: Toolset) -> str | None:
    """The declared tool an invented name means, or None: the name's object
    words (after its verb) must meet the tool's name (2 points each) or its
    description (1 point), in either language; the verbs must agree where the
    invented one writes (``cancelar_pedido`` is no lookup); the single best wins."""
    words = [fold(w) for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if w]
    if not words:
        return None
    verb, objects = (words[0], words[1:]) if len(words) > 1 else ("", words)
    scores: dict[str, int] = {}
    for tool in toolset.tools:
        own = [fold(w) for w in re.split(r"[_\-.\s]+", tool.name) if w]
        described = _stems(fold(w) for w in _WORD.findall(tool.description))
        score = 0
        for word in objects:
            stems = _stems(_senses(word))
            if stems & _stems(own[1:] or own):
                score += 2
            elif stems & described:
                score += 1
        if not score:
            continue
        writes = verb in WRITE_VERBS or any(v in WRITE_VERBS for v in _senses(verb))
        if writes and not (_stems(_senses(verb)) & _stems(own)):
            continue  # an invented write is not the same as a declared tool that does something else
        if not writes and effect(tool, toolset) == "writes":
            continue  # a lookup is not a write
        scores[tool.name] = score
    if not scores:
        return None
    best = max(scores.values())
    winners = [n for n, s in scores.items() if s == best]
    return winners[0] if len(winners) == 1 and best >= 2 else None
