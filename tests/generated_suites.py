"""Seeded suites no one tuned on (issue 44, item 3), for tests and benches only.

``generate(seed)`` builds a toolset of 5–30 tools in Spanish (even seeds) or
English (odd seeds) from the phrasing pools in ``tests/phrasing_pools/``,
which the simulated agent's code never reads: tools are a verb and an object
("buscar_pedido", "find_order"), so many pairs differ in one word and read in
one shape ("Busca un pedido por su número." / "Busca un producto por su
SKU."). Each tool has one case: a customer's question in the pools' words
(often a synonym of the object: "compra" for "pedido") with the identifier
it goes by. ``delimited`` writes a person's delimitation on the tools a run
confused; ``pasted`` one sentence on every tool.

The measures (confusions, failed trajectories, ``fix --out``) run the real
simulated agent and scorer; ``fix_out`` goes through the store as the
command does.
"""

from __future__ import annotations

import copy
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

POOLS = Path(__file__).resolve().parent / "phrasing_pools"
RATES = "confusion=0.9"  # as the shop suite was run


@lru_cache(maxsize=2)
def pools(language: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((POOLS / f"{language}.yaml").read_text(encoding="utf-8"))
    return data


@dataclass(frozen=True)
class Tool:
    name: str
    verb: dict[str, Any]
    obj: dict[str, Any]


@dataclass
class GeneratedSuite:
    seed: int
    language: str
    tools: dict[str, Tool]
    document: dict[str, Any]

    def descriptions(self) -> dict[str, str]:
        return {t["name"]: t["description"] for t in self.document["toolset"]["tools"]}

    def with_descriptions(self, descriptions: dict[str, str], variant: str) -> dict[str, Any]:
        doc = copy.deepcopy(self.document)
        doc["name"] = f"{doc['name']}-{variant}"
        for t in doc["toolset"]["tools"]:
            t["description"] = descriptions.get(t["name"], t["description"])
        return doc


def _vary(example: str, rng: random.Random) -> str:
    """Another value of the same shape (digits redrawn; an all-letters code redrawn)."""
    if example.isalpha() and example.isupper():
        return "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in example)
    return re.sub(r"\d", lambda _m: str(rng.randrange(10)), example)


def _fill(template: str, obj: dict[str, Any], **extra: str) -> str:
    values = {k: str(v) for k, v in obj.items()}
    values.update(extra)
    text = template.format(**values)
    return text[0].upper() + text[1:]


def generate(seed: int) -> GeneratedSuite:
    rng = random.Random(f"generated-suite:{seed}")
    language = "es" if seed % 2 == 0 else "en"
    pool = pools(language)
    size = rng.randint(5, 30)
    count = max(2, rng.randint(size // 4 + 1, size // 2 + 2))
    objects = rng.sample(pool["objects"], k=min(len(pool["objects"]), count))
    verbs = pool["verbs"]
    lookup = verbs[0]
    combos = [(v, o) for o in objects for v in verbs]
    forced = [(lookup, o) for o in objects[:3]]  # look-alike lookups: names that differ in one word
    rest = [c for c in combos if c not in forced]
    rng.shuffle(rest)
    chosen = (forced + rest)[:size]
    tools: dict[str, Tool] = {}
    docs: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    for verb, obj in chosen:
        name = f"{verb['name']}_{obj['name']}"
        tools[name] = Tool(name, verb, obj)
        description = _fill(rng.choice(verb["describe"]), obj)
        prop: dict[str, Any] = {"type": "string"}
        if rng.random() < 0.6:
            prop["pattern"] = obj["pattern"]
        docs.append(
            {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": {obj["arg"]: prop}, "required": [obj["arg"]]},
                "mock": {"response": {"ok": True, obj["arg"]: obj["example"]}},
            }
        )
        value = _vary(str(obj["example"]), rng)
        said = obj["syn"] if rng.random() < 0.6 else obj["noun"]
        question = _fill(rng.choice(verb["ask"]), obj, ex=value, syn=said)
        cases.append(
            {
                "id": f"c-{name}",
                "question": question,
                "expected_calls": [{"name": name, "arguments": {obj["arg"]: value}}],
            }
        )
    document = {
        "name": f"gen-{seed}",
        "toolset": {"name": f"gen-{seed}", "label": "base", "tools": docs},
        "cases": cases,
    }
    return GeneratedSuite(seed=seed, language=language, tools=tools, document=document)


def delimited(suite: GeneratedSuite, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """A person's delimitation on each ``(expected, called)`` pair: on the
    called tool, naming the expected one and what it is about."""
    rng = random.Random(f"delimit:{suite.seed}")
    texts = suite.descriptions()
    for expected, called in pairs:
        other = suite.tools[expected]
        sentence = _fill(
            rng.choice(pools(suite.language)["delimit"]),
            {},
            other=expected,
            other_verb=str(other.verb["says"]),
            other_un=str(other.obj["un"]),
            other_noun=str(other.obj["noun"]),
            other_key=str(other.obj["key"]),
        )
        texts[called] = f"{texts[called]} {sentence}"
    return suite.with_descriptions(texts, "delimited")


def pasted(suite: GeneratedSuite) -> dict[str, Any]:
    """One sentence of the pool pasted on every tool."""
    sentence = random.Random(f"pasted:{suite.seed}").choice(pools(suite.language)["pasted"])
    return suite.with_descriptions({n: f"{d} {sentence}" for n, d in suite.descriptions().items()}, "pasted")


# -- measures ------------------------------------------------------------------


def cells(document: dict[str, Any], *, trials: int = 4, seed: int = 0, rates: str = RATES) -> Counter[tuple[str, str]]:
    """(expected, called) -> calls to another declared tool, over ``trials`` runs of every case."""
    from app.agents.simulated import SimRates, SimulatedAgent
    from app.core.run.runner import run_case
    from app.core.suites.suite import parse_suite

    suite = parse_suite(document)
    agent = SimulatedAgent(suite.toolset, rates=SimRates.parse(rates), seed=seed)
    known = {t.name for t in suite.toolset.tools}
    out: Counter[tuple[str, str]] = Counter()
    for case in suite.cases:
        for trial in range(trials):
            trajectory = run_case(agent.for_case(case, trial), suite, case, trial=trial)
            expected = case.expected_calls[0].name if case.expected_calls else ""
            for call in trajectory.calls:
                if call.name != expected and call.name in known:
                    out[(expected, call.name)] += 1
    return out


def most_confused(counts: Counter[tuple[str, str]], k: int = 3) -> list[tuple[str, str]]:
    return [pair for pair, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def fix_out(
    document: dict[str, Any], folder: Path, *, trials: int = 4, seed: int = 0, rates: str = RATES
) -> tuple[int, int, list[Any]]:
    """Failed trajectories before and after ``toollens fix RUN --out`` (the
    proposals that explain a failed trajectory, written into a candidate run
    with the same agent, trials and seed), and the proposals."""
    from app.core.advise.fix import candidate_suite
    from app.runner.session import RunRequest, run_agent
    from app.settings import Settings
    from app.store.db import make_sessionmaker, session_scope
    from app.store.fix import run_fix
    from app.store.importer import open_store

    url = f"sqlite:///{folder / 'fix.db'}"
    settings = Settings(database_url=url)

    def run(doc: dict[str, Any], name: str) -> int:
        out = run_agent(
            settings,
            RunRequest(
                agent="simulated",
                suite_document=doc,
                trials=trials,
                seed=seed,
                sim_rates=rates,
                run_name=name,
                concurrency=1,
            ),
        )
        return out.summary.failed

    before = run(document, "base")
    engine = open_store(settings)
    with session_scope(make_sessionmaker(engine)) as session:
        found = run_fix(session, "base")
    engine.dispose()
    chosen = [p for p in found.proposals if not p.advice]
    after = run(candidate_suite(found.document, chosen), "fixed")
    return before, after, chosen
