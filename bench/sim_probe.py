"""The simulated agent's confusions on a small shop suite (issue 38's probe):
base descriptions, a negative delimitation added to the three look-alike
pairs only, and one delimitation sentence pasted into every description.
Also the demo's v1 and v2 suites.

    .venv/bin/python bench/sim_probe.py [--trials 10] [--confusion 0.9] [--seed 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.agents.simulated import SimRates, SimulatedAgent
from app.core.reports.evaluate import score_trajectories
from app.core.run.runner import run_case
from app.core.suites.suite import Suite, load_suite, parse_suite

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# Three look-alike pairs: (tool, description, the case's question, its argument)
SHOP: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("buscar_pedido", "Busca un pedido por su número.", "¿Qué productos trae mi pedido 4417?", {"numero": "4417"}),
    (
        "buscar_producto",
        "Busca un producto por su nombre.",
        "¿Tienen el producto audífonos X2?",
        {"numero": "audífonos X2"},
    ),
    (
        "ver_envio",
        "Muestra el estado de un envío.",
        "¿En qué estado está el envío de la compra 4417?",
        {"numero": "4417"},
    ),
    (
        "ver_devolucion",
        "Muestra el estado de una devolución.",
        "¿En qué estado está la devolución de la compra 4417?",
        {"numero": "4417"},
    ),
    (
        "cancelar_compra",
        "Cancela una compra pendiente.",
        "Quiero cancelar la compra 4417, todavía está pendiente.",
        {"numero": "4417"},
    ),
    (
        "anular_cobro",
        "Anula el cobro de una compra.",
        "Me cobraron dos veces la compra 4417: anulen el cobro repetido.",
        {"numero": "4417"},
    ),
)
PAIRS = {"buscar_pedido": "buscar_producto", "ver_envio": "ver_devolucion", "cancelar_compra": "anular_cobro"}
PARTNER = {**PAIRS, **{b: a for a, b in PAIRS.items()}}


def shop_suite(variant: str = "base") -> Suite:
    """The shop suite: ``base``, ``pairs`` ("NO sirve para eso: usa <partner>"
    on each look-alike) or ``everywhere`` ("NO sirve para otras consultas:
    usa <every other tool>" on every tool)."""
    names = [name for name, *_ in SHOP]
    tools = []
    for name, description, _, _ in SHOP:
        if variant == "pairs":
            description += f" NO sirve para eso: usa {PARTNER[name]}."
        elif variant == "everywhere":
            description += " NO sirve para otras consultas: usa " + ", ".join(n for n in names if n != name) + "."
        tools.append(
            {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": {"numero": {"type": "string"}}, "required": ["numero"]},
                "mock": {"response": {"ok": True}},
            }
        )
    cases = [
        {"id": name, "question": question, "expected_calls": [{"name": name, "arguments": args}]}
        for name, _, question, args in SHOP
    ]
    return parse_suite({"name": f"tienda-{variant}", "toolset": {"name": "tienda", "tools": tools}, "cases": cases})


def confusions(suite: Suite, rates: SimRates, seed: int, trials: int) -> int:
    """Calls to a real tool other than the expected one, over ``trials`` runs of every case."""
    agent = SimulatedAgent(suite.toolset, rates=rates, seed=seed)
    trajectories = [run_case(agent.for_case(c, t), suite, c, trial=t) for c in suite.cases for t in range(trials)]
    report = score_trajectories(suite, trajectories).to_json()
    return sum(
        c["count"]
        for c in report["confusion"]
        if c["expected"] != c["called"] and "(" not in c["expected"] + c["called"] and not c["hallucinated"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=10, help="trials of each of the 6 shop cases (10: 60 runs)")
    parser.add_argument("--confusion", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()
    rates = SimRates(confusion=args.confusion)
    for variant in ("base", "pairs", "everywhere"):
        print(
            f"shop {variant:>10}: {confusions(shop_suite(variant), rates, args.seed, args.trials)} confusions "
            f"({len(SHOP) * args.trials} runs, confusion={args.confusion}, seed {args.seed})"
        )
    for version in ("v1", "v2"):
        suite = load_suite(EXAMPLES / f"suite_{version}.yaml")
        print(f"demo {version}: {confusions(suite, SimRates(), 7, 10)} confusions (10 trials, default rates, seed 7)")


if __name__ == "__main__":
    main()
