"""The rule-based simulated user under a profile (app/core/reports/profiles.py names
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
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.agents.users import RuleUser, language
from app.core.records import Message, UserError
from app.core.reports.profiles import BY_NAME, COOPERATIVE
from app.core.run.conversation import asked_for, asks, asks_to_confirm
from app.core.suites.suite import UserSpec

_WORDS = {
    "es": {
        "leave": "No tengo tiempo para esto, lo dejo aquí.",
        "not_at_hand": "No tengo ese dato a mano ahora.",
        "wrong_fix": "Perdón, me equivoqué: mi {name} es {value}.",
        "decline": "No, espera: mejor no lo hagas todavía.",
        "take_back": "Pensándolo bien, sí: hazlo. Confirmo.",
    },
    "en": {
        "leave": "I don't have time for this, I'll leave it here.",
        "not_at_hand": "I don't have that at hand right now.",
        "wrong_fix": "Sorry, my mistake: my {name} is {value}.",
        "decline": "No, wait: better not do it yet.",
        "take_back": "On reflection, yes: do it. I confirm.",
    },
}


def wrong_value(value: str, rng: random.Random) -> str:
    """The value with one digit (else one letter) changed: written like it, never equal to it."""
    spots = [i for i, ch in enumerate(value) if ch.isdigit()] or [i for i, ch in enumerate(value) if ch.isalpha()]
    if not spots:
        return value + "0"
    i = rng.choice(spots)
    pool = "0123456789" if value[i].isdigit() else "abcdefghijklmnopqrstuvwxyz"
    new = rng.choice([c for c in pool if c != value[i].lower()])
    return value[:i] + (new.upper() if value[i].isupper() else new) + value[i + 1 :]


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
        if (
            p == "impatient"
            and replies >= 1
            and (asks(last) or asks_to_confirm(last))
            and self.rng.random() < BY_NAME[p].rate
        ):
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
