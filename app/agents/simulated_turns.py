"""The simulated agent in a conversation (a multi-turn case): it asks the
user for what the next step needs and nobody has said yet, and for a
confirmation before an irreversible tool, then carries on with the case's
expected steps, making the same failures at the same rates as in one turn."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.agents.simulated import CaseAgent
from app.core.conversation import fold, says_value
from app.core.router import Toolbox
from app.core.suite import ExpectedCall


@dataclass
class ConversingAgent(CaseAgent):
    plan: list[ExpectedCall] | None = None  # a simulated user's conversation: the steps still to do
    asked: set[str] = field(default_factory=set)  # what it asked the user for (argument names, "confirm:<tool>")

    def __call__(self, message: str, toolbox: Toolbox) -> str:
        """One turn: a scripted turn's steps, then a question for what the next
        turn needs (a value the user has not given, or a confirmation before an
        irreversible tool); with a simulated user, the case's steps until one
        needs such an answer."""
        self.heard.append(message)
        turns = self.case.turns
        if turns is not None:
            k = len(self.heard) - 1
            steps = self.shuffled(turns[k].expected_calls or []) if k < len(turns) else []
            answer = self.do_steps(steps, toolbox)
            if answer is not None:
                return answer
            upcoming = (turns[k + 1].expected_calls or []) if k + 1 < len(turns) else []
            question = self.question_for(upcoming[0], confirm=True) if upcoming else None
            return question or self.answer()
        if self.plan is None:
            self.plan = self.shuffled(self.case.expected_calls or [])
        while self.plan:
            step = self.plan[0]
            confirmed = self.confirmed(message)
            if not confirmed and f"confirm:{step.name}" in self.asked and self.irreversible(step.name):
                self.plan.pop(0)  # asked, and not confirmed: not done
                return self.says("declined", tool=step.name)
            question = self.question_for(step, confirm=not confirmed)
            if question is not None:
                return question
            self.plan.pop(0)
            if self.chance(self.parent.rates.skip):
                continue
            answer = self.do_step(step, toolbox)
            if answer is not None:
                self.plan = []
                return answer
        return self.answer()

    def question_for(self, step: ExpectedCall, *, confirm: bool) -> str | None:
        """What to ask the user before this step (each thing once), or None."""
        missing = [key for key in self.user_values(step) if key not in self.asked]
        if missing:
            self.asked.update(missing)
            return self.says("ask", values=", ".join(missing), tool=step.name)
        if confirm and self.irreversible(step.name) and f"confirm:{step.name}" not in self.asked:
            self.asked.add(f"confirm:{step.name}")
            return self.says("confirm", tool=step.name)
        return None

    def user_values(self, step: ExpectedCall) -> list[str]:
        """The step's text arguments (compared exactly) that nothing said or seen so far holds."""
        known = " ".join([*self.heard, *self.seen])
        return [key for key, value in step.arguments.items()
                if isinstance(value, str) and (step.tolerance.get(key) is None or step.tolerance[key].kind == "exact")
                and not says_value(value, known)]

    def irreversible(self, name: str) -> bool:
        tool = self.parent.toolset.get(name)
        return tool is not None and (tool.destructive or "irreversible" in fold(tool.description))

    def confirmed(self, message: str) -> bool:
        words = fold(message)
        return "confirm" in words or words.startswith(("si", "yes"))
