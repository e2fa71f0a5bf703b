"""A user model's conversation under a profile (app/agents/users.py plays the model): each reply
read for the departure its profile asks for and recorded as the act the rule-based user
(app/agents/profiles.py) records for it (docs/runner.md#user-profiles)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.records import Message, UserError
from app.core.run.conversation import asked_for, asks, asks_to_confirm, misstated, says_value
from app.core.suites.suite import UserSpec

_DECLINES = re.compile(r"\b(no|not|don['’]?t|wait|hold on|rather not|espera|todav[ií]a)\b", re.I)
_CONFIRMS = re.compile(r"\b(yes|yeah|sure|confirm|go ahead|proceed|s[ií]|confirmo|hazlo|adelante)\b", re.I)


@dataclass
class ModelConversation:
    """One conversation of a user model under ``profile`` (app/agents/users.py tells it the
    profile): its replies as they come, each read for the departure that profile asks
    for, recorded as the act the rule-based user records for it (docs/runner.md#user-profiles)."""

    model: Any  # the LLMUser that answers (its client is shared by every conversation)
    profile: str
    acts: list[UserError] = field(default_factory=list)
    wrong: tuple[str, str] | None = None  # wrong_assumption: (fact, true value) given wrong, not yet corrected
    held: list[str] = field(default_factory=list)  # drip_feed: facts asked for together, not given yet
    used: bool = False  # the once-per-conversation chance (a first fact, a first ask, a first confirmation) is gone
    declined: bool = False  # changes_mind: the next reply may take the decline back

    @property
    def label(self) -> str:
        return str(self.model.label)

    async def reply(self, spec: UserSpec, transcript: Sequence[Message]) -> str:
        text = str(await self.model.reply(spec, transcript))
        self.read(spec, transcript, text)
        return text

    def _act(self, kind: str, at: int, detail: str) -> None:
        self.acts.append(UserError(kind, f"message {at + 1}: {detail}"))

    def read(self, spec: UserSpec, transcript: Sequence[Message], text: str) -> None:
        """Record what the reply ``text`` to ``transcript`` did of the profile's departure."""
        last = next((m.content for m in reversed(transcript) if m.role == "assistant"), "")
        at, p = len(transcript), self.profile
        asked = [name for name in spec.known if asked_for(name, last)]
        gave = [name for name in spec.known if says_value(spec.known[name], text)]
        if p == "impatient":
            replies = sum(1 for m in transcript if m.role == "user") - 1
            if spec.stop in text and replies >= 1 and (asks(last) or asks_to_confirm(last)):
                self._act("ended_early", at, "leaves while the agent asks instead of serving")
        elif p == "wrong_assumption":
            if self.wrong is not None and self.wrong[0] in gave:
                self._act("corrected", at, f"corrects {self.wrong[0]} to {self.wrong[1]}")
                self.wrong = None
            for name, value in spec.known.items() if not self.used else ():
                bad = misstated(value, text, [v for k, v in spec.known.items() if k != name])
                if bad:
                    self.used, self.wrong = True, (name, str(value))
                    self._act("wrong_value", at, f"gives {name} as {bad[0]}, not {value}")
                    break
            self.used = self.used or bool(gave)  # its first fact given right: the profile did not fire
        elif p == "omits_detail" and asked and not self.used:
            self.used = True
            if asked[0] not in gave:
                self._act("withheld", at, f"does not give {asked[0]} at its first ask")
        elif p == "drip_feed":
            for name in [n for n in self.held if n in gave]:
                self.held.remove(name)
                self._act("held_back", at, f"gives {name} a reply late")
            given = [n for n in asked if n in gave]
            if given and len(given) < len(asked):
                rest = [n for n in asked if n not in given]
                self.held.extend(n for n in rest if n not in self.held)
                self._act("held_back", at, f"gives {', '.join(given)} alone, holds back {', '.join(rest)}")
        elif p == "changes_mind":
            if self.declined:
                self.declined = False
                if _CONFIRMS.search(text):
                    self._act("took_back", at, "takes the decline back and confirms")
            elif not self.used and not asked and asks_to_confirm(last):
                self.used = True
                if spec.stop not in text and _DECLINES.search(text):
                    self.declined = True
                    self._act("declined", at, "declines the confirmation it is asked for")
