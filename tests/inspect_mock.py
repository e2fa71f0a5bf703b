"""An Inspect AI log made by the real ``inspect_ai`` package, with its mock
model playing a scripted agent (tests/importers/test_inspect_log.py reads it).

Two samples, one tool (``weather(city)``, which raises a ToolError for a city
it does not know, and answers "Error: ..." as plain text for "Nowhere"):

- ``retry``: weather(Atlantis) fails (a tool error), weather(Paris) answers;
  the agent says "It is 18C in Paris." (target "18C": C).
- ``give-up``: weather(Atlantis) fails, weather(Nowhere) returns the text
  "Error: no station" without Inspect's error field (an observation, not a tool
  error); the agent says "I cannot find the weather for Atlantis, I give up."
  (target "12C": I).

Each model answer reports usage: input 100 x the step (1, 2, 3), output 10,
total input + output + 5 cached tokens read (an Anthropic-style split).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolError, tool

MODEL = "mockllm/model"
SCRIPTS: dict[str, list[Any]] = {
    "retry": [("weather", {"city": "Atlantis"}), ("weather", {"city": "Paris"}), "It is 18C in Paris."],
    "give-up": [
        ("weather", {"city": "Atlantis"}),
        ("weather", {"city": "Nowhere"}),
        "I cannot find the weather for Atlantis, I give up.",
    ],
}


@tool
def weather() -> Any:
    async def execute(city: str) -> str:
        """The weather of a city.

        Args:
            city: The city's name.
        """
        if city == "Atlantis":
            raise ToolError(f"unknown city {city}")
        if city == "Nowhere":
            return "Error: no station"
        return "18C and sunny"

    return execute


def _output(messages: list[ChatMessage], *_: Any) -> ModelOutput:
    question = str(messages[0].content)
    script = SCRIPTS["retry" if "Paris" in question else "give-up"]
    step = sum(1 for m in messages if m.role == "assistant")
    move = script[min(step, len(script) - 1)]
    if isinstance(move, tuple):
        out = ModelOutput.for_tool_call(MODEL, move[0], move[1], tool_call_id=f"call-{step}")
    else:
        out = ModelOutput.from_content(MODEL, move)
    out.usage = ModelUsage(
        input_tokens=100 * (step + 1), output_tokens=10, total_tokens=100 * (step + 1) + 15, input_tokens_cache_read=5
    )
    return out


def make_log(folder: Path, log_format: str = "eval") -> Path:
    """Run the task with the mock model; the log file written."""
    task = Task(
        dataset=[
            Sample(id="retry", input="What is the weather in Paris?", target="18C"),
            Sample(id="give-up", input="What is the weather in Atlantis?", target="12C"),
        ],
        solver=[use_tools(weather()), generate()],
        scorer=includes(),
        name="weather",
    )
    (log,) = eval(
        task,
        model=get_model(MODEL, custom_outputs=_output),
        log_dir=str(folder),
        log_format=log_format,
        display="none",
        max_samples=1,
    )
    return Path(log.location)
