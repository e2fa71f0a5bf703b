"""The rule-based simulated user under a profile (app/core/profiles.py names
them and their rates; docs/runner.md#user-profiles says what each does).

``ProfiledUser(profile, seed)`` hands the runner one ``ProfiledConversation``
per case run (``for_conversation``), seeded by the run's seed, the case, the
trial and the profile: the same run gives the same replies. Each deliberate
departure from the cooperative user is recorded as an act (``acts``, kept as
the record's ``user_acts``): what the profile did, where, so that the blame
can be checked against known injected faults.

A user model (``--user-model``) is told its profile instead; ``ModelConversation``
reads each of its replies for the departure that profile asks for and records it
as the same act, so that its record says where the model followed its profile.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.agents.users import RuleUser, language
from app.core.conversation import asked_for, asks, asks_to_confirm, misstated, says_value
from app.core.profiles import BY_NAME, COOPERATIVE
from app.core.records import Message, UserError
from app.core.suite import UserSpec

_WORDS = {
    "es": {"leave": "No tengo tiempo para esto, lo dejo aquí.", "not_at_hand": "No tengo ese dato a mano ahora.",
           "wrong_fix": "Perdón, me equivoqué: mi {name} es {value}.",
           "decline": "No, espera: mejor no lo hagas todavía.",
           "take_back": "Pensándolo bien, sí: hazlo. Confirmo."},
    "en": {"leave": "I don't have time for this, I'll leave it here.",
           "not_at_hand": "I don't have that at hand right now.",
           "wrong_fix": "Sorry, my mistake: my {name} is {value}.", "decline": "No, wait: better not do it yet.",
           "take_back": "On reflection, yes: do it. I confirm."},
}


def wrong_value(value: str, rng: random.Random) -> str:
    """The value with one digit (else one letter) changed: written like it, never equal to it."""
    spots = [i for i, ch in enumerate(value) if ch.isdigit()] or [i for i, ch in enumerate(value) if ch.isalpha()]
    if not spots:
        return value + "0"
    i = rng.choice(spots)
    pool = "0123456789" if value[i].isdigit() else "abcdefghijklmnopqrstuvwxyz"
    new = rng.choice([c for c in pool if c != value[i].lower()])
    return value[:i] + (new.upper() if value[i].isupper() else new) + value[i + 1:]


@dataclass
class ProfiledConversation:
    """One conversation of the rule-based user under ``profile``: the cooperative
    user's replies, departed from as the profile says (each departure an act)."""

    profile: str
    rng: random.Random
    base: RuleUser = field(default_factory=RuleUser)
    acts: list[UserError] = field(default_factory=list)
    fires: bool = True  # drawn once per conversation for the profiles with a per-conversation rate
    queued: list[str] = field(default_factory=list)  # drip_feed: facts asked for, still held back
    fixing: tuple[str, str] | None = None  # wrong_assumption: (fact, true value) to correct next
    used: bool = False  # the once-per-conversation act (wrong value, omission, decline) happened
    declined: bool = False  # changes_mind: the next reply takes the decline back

    @property
    def label(self) -> str:
        return f"rules ({self.profile})"

    def _act(self, kind: str, at: int, detail: str) -> None:
        self.acts.append(UserError(kind, f"message {at + 1}: {detail}"))

    def reply(self, spec: UserSpec, transcript: Sequence[Message]) -> str:
        words = _WORDS[language(spec)]
        last = next((m.content for m in reversed(transcript) if m.role == "assistant"), "")
        at = len(transcript)  # the index this reply will have
        replies = sum(1 for m in transcript if m.role == "user") - 1
        asked = [name for name in spec.known if asked_for(name, last)]
        p = self.profile
        if p == "impatient" and replies >= 1 and (asks(last) or asks_to_confirm(last)) \
                and self.rng.random() < BY_NAME[p].rate:
            self._act("ended_early", at, "leaves while the agent asks instead of serving")
            return f"{words['leave']} {spec.stop}"
        if p == "wrong_assumption" and self.fixing is not None:
            name, value = self.fixing
            self.fixing = None
            self._act("corrected", at, f"corrects {name} to {value}")
            fix = words["wrong_fix"].format(name=name.replace("_", " "), value=value)
            rest = self.base.reply(spec, transcript)  # the reply it owes too (a confirmation), unless it leaves
            return fix if spec.stop in rest else f"{fix} {rest}"
        if p == "changes_mind" and self.declined:
            self.declined = False
            self._act("took_back", at, "takes the decline back and confirms")
            return words["take_back"]
        if p == "drip_feed" and self.queued:
            name = self.queued.pop(0)
            self._act("held_back", at, f"gives {name} a reply late")
            return self.base.fact(spec, name)
        if asked and self.fires and not self.used:
            first = asked[0]
            if p == "wrong_assumption":
                self.used, self.fixing = True, (first, str(spec.known[first]))
                bad = wrong_value(str(spec.known[first]), self.rng)
                self._act("wrong_value", at, f"gives {first} as {bad}, not {spec.known[first]}")
                return self.base.fact(spec, first, bad)
            if p == "omits_detail":
                self.used = True
                self._act("withheld", at, f"does not give {first} at its first ask")
                others = [self.base.fact(spec, n) for n in asked[1:]]
                return " ".join([words["not_at_hand"], *others])
        if p == "drip_feed" and len(asked) > 1:
            self.queued.extend(asked[1:])
            self._act("held_back", at, f"gives {asked[0]} alone, holds back {', '.join(asked[1:])}")
            return self.base.fact(spec, asked[0])
        if p == "changes_mind" and self.fires and not self.used and not asked and asks_to_confirm(last):
            self.used = self.declined = True
            self._act("declined", at, "declines the confirmation it is asked for")
            return words["decline"]
        return self.base.reply(spec, transcript)


@dataclass
class ProfiledUser:
    """The rule-based user under one profile, for a whole run: ``for_conversation``
    gives each case run its own seeded conversation."""

    profile: str = COOPERATIVE
    seed: int = 0

    @property
    def label(self) -> str:
        return f"rules ({self.profile})"

    def for_conversation(self, case_id: str, trial: int) -> ProfiledConversation:
        rng = random.Random(zlib.crc32(f"{self.seed}:{case_id}:{trial}:{self.profile}".encode()))
        rate = BY_NAME[self.profile].rate if self.profile in BY_NAME else 1.0
        once = self.profile in ("wrong_assumption", "omits_detail", "changes_mind")
        return ProfiledConversation(self.profile, rng, fires=not once or rng.random() < rate)

    def reply(self, spec: UserSpec, transcript: Sequence[Message]) -> str:
        """Without a conversation of its own (a caller that never asks for one): the cooperative reply."""
        return RuleUser().reply(spec, transcript)


_DECLINES = re.compile(r"\b(no|not|don'?t|wait|hold on|rather not|espera|todav[ií]a)\b", re.I)
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
