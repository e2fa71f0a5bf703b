"""BFCL's own verdicts on a result file, by bfcl-eval's checker functions.

Run as a script (its own process: the stand-ins below stay out of the test
session): ``python tests/importers/bfcl_reference.py RESULT QUESTIONS ANSWERS``
prints ``{id: [valid, error_type]}`` as JSON. It follows bfcl-eval's
``eval_runner``: ``default_decode_ast_prompting`` then ``ast_checker`` for
single-turn, ``relevance``'s rule for irrelevance, ``default_decode_execute_prompting``
per step then ``multi_turn_checker`` for multi-turn (a turn given as one text
is one step). bfcl-eval installed with ``--no-deps`` cannot import its model
registry (every provider's SDK) or its Java/JavaScript parsers (tree-sitter);
the checker needs neither for Python answers, so stand-ins take their place:
a prompting model's config (``underscore_to_dot`` False), and empty parsers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from collections import defaultdict
from pathlib import Path
from typing import Any


def _stub(name: str, **attrs: Any) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__dict__["__getattr__"] = lambda attr: object  # anything else it is asked for
    sys.modules[name] = module


class _PromptingModel:
    underscore_to_dot = False


def _install_stand_ins() -> None:
    _stub("bfcl_eval.constants.model_config", MODEL_CONFIG_MAPPING=defaultdict(_PromptingModel))
    _stub("bfcl_eval.model_handler.parser.java_parser", parse_java_function_call=None)
    _stub("bfcl_eval.model_handler.parser.js_parser", parse_javascript_function_call=None)
    for name in ("filelock", "tenacity", "dotenv"):
        try:
            found = importlib.util.find_spec(name) is not None
        except ValueError:
            found = False
        if not found:
            _stub(name)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def verdicts(result: Path, questions: Path, answers: Path | None) -> dict[str, tuple[bool, str]]:
    _install_stand_ins()
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import is_empty_execute_response
    from bfcl_eval.model_handler.utils import default_decode_ast_prompting, default_decode_execute_prompting
    from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

    prompts = {q["id"]: q for q in _lines(questions)}
    truth = {a["id"]: a["ground_truth"] for a in _lines(answers)} if answers else {}
    out: dict[str, tuple[bool, str]] = {}
    for entry in _lines(result):
        qid, raw = entry["id"], entry["result"]
        category = qid.rsplit("_", 1)[0]
        if "multi_turn" in category:
            turns = []
            for turn in raw:
                steps = []
                for step in turn if isinstance(turn, list) else [turn]:
                    try:
                        decoded = default_decode_execute_prompting(step, False)
                    except Exception:  # BFCL passes over a step it cannot decode
                        continue
                    if not is_empty_execute_response(decoded):
                        steps.append(decoded)
                turns.append(steps)
            if len(turns) != len(truth[qid]):
                out[qid] = (False, "multi_turn:force_terminated")
                continue
            checked = multi_turn_checker(turns, truth[qid], json.loads(json.dumps(prompts[qid])), category, "ref")
            out[qid] = (checked["valid"], checked.get("error_type", ""))
        elif "irrelevance" in category:
            try:
                called = not is_empty_output(default_decode_ast_prompting(raw, ReturnFormat.PYTHON, False))
            except Exception:
                called = False
            out[qid] = (not called, "irrelevance_error:decoder_success" if called else "")
        else:
            try:
                decoded = default_decode_ast_prompting(raw, ReturnFormat.PYTHON, False)
            except Exception:
                out[qid] = (False, "ast_decoder:decoder_failed")
                continue
            if not is_function_calling_format_output(decoded):
                out[qid] = (False, "ast_decoder:decoder_wrong_output_format")
                continue
            checked = ast_checker(prompts[qid]["function"], decoded, truth[qid], Language.PYTHON, category, "ref")
            out[qid] = (checked["valid"], checked.get("error_type", ""))
    return out


if __name__ == "__main__":
    answers_arg = Path(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else None
    print(json.dumps(verdicts(Path(sys.argv[1]), Path(sys.argv[2]), answers_arg)))
