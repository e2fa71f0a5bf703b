"""Who failed a conversation: the agent, the simulated user, or the task.

A second opinion on every failed conversation (docs/blame.md). Benchmarks
charge every failure to the agent; a simulated user also ends conversations
early, states facts its instructions do not hold, withholds what it was
given, and some references cannot be reached. Each detector below is a
plain rule over the trajectory, its case and its score; ``blame_of`` runs
them and keeps the cause that came first:

* task findings (the reference contradicts the policy or asks for a value
  nothing in the conversation could give) make the conversation unwinnable:
  they win;
* a user finding wins when it comes before the agent's first wrong write
  (a successful state-changing call the reference does not hold);
* otherwise the agent, with its first wrong write or first missing write as
  evidence.

The user's instructions come from the case's ``user instructions:`` note (the
τ² and tau-bench importers write it) or from the case's own simulated user
(its instruction and known facts); without them only the rules that need no
instructions run. Pure: no store, no web.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache, partial
from typing import Any

import orjson

from app.core.records import Trajectory
from app.core.run.conversation import asked_for, says_value
from app.core.suites.suite import Case

AGENT, USER, TASK = "agent", "user", "task"
BLAMES = (AGENT, USER, TASK)
INSTRUCTIONS_NOTE = "user instructions: "
POLICY_TIME_NOTE = "policy time: "
BAGS_NOTE = "policy bags: "  # the policy's free checked bags, as ``bag_allowance_note`` writes them
CUT_STOPS = ("step_limit", "error_limit", "call_limit", "agent_error", "user_error")  # a run cut before its verdict
USER_ACTION_NOTE = re.compile(r"the user is expected to call (\w+)\(")
MAX_QUOTE = 300
MAX_SCAN = 200  # messages read per conversation (a bound on hostile input)
MAX_TEXT = 20_000  # characters read per message
MAX_HAY = 2_000_000  # characters of a conversation searched for a stated fact

# -- phrase pools (the tests hold pools written apart from these) ------------

STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
TRANSFER_TOKEN = "###TRANSFER###"
# Each pattern opens with a look-ahead at the letters its words start with: the same matches, but a
# position is given up at one test (twice as fast on long messages).
_LEAVING = re.compile(
    r"(?=[gbtrinh])\b(good ?bye|bye\b|talk (?:to you )?soon|get back to you|be in touch"
    r"|reach out (?:again|later|soon|when)"
    r"|i['’]?ll (?:check|look|find|handle|deal with|sort)\b.{0,40}\b(?:later|back|first|soon)"
    r"|that['’]?s all (?:i need|for now|for today)|that['’]?s everything|nothing else|no,? that['’]?s all"
    r"|have a (?:great|good|nice|wonderful) (?:day|one|evening))",
    re.I,
)
_REFUSAL = re.compile(
    r"(?=[ucniadrspth])\b(unable to|can ?not|can['’]t|cannot|not able to|not possible|isn['’]t possible|is not possible"
    r"|not allowed"
    r"|not eligible|unfortunately|i['’]?m sorry, but|against (?:the |our )?policy|does not allow|doesn['’]t allow"
    r"|(?:recommend|suggest|need to|should|please) contact(?:ing)?|transfer(?:ring)? you|human agent)",
    re.I,
)
_REQUEST = re.compile(
    r"(?=[pglyia])\b(please (?:go ahead|proceed|process|apply|cancel|update|book|make|submit|confirm)"
    r"|go ahead (?:and|with)"
    r"|let me know once|proceed (?:with|as)|yes,? please|i confirm|approve)",
    re.I,
)
_ASKS_HUMAN = re.compile(
    r"(?=[hrltsc])\b(human (?:agent|representative|being)|real person|live (?:agent|person)|transfer me"
    r"|speak (?:to|with) "
    r"(?:a |an )?(?:person|representative|supervisor|manager|someone)|connect me (?:to|with) (?:a |an )?"
    r"(?:human|person|representative|agent|supervisor))",
    re.I,
)
_INSTRUCTED_HUMAN = re.compile(r"\b(human|transfer|representative|supervisor|manager)", re.I)
_OFFERS_TRANSFER = re.compile(r"(?=[thc])\b(transfer you|human agent|connect you)", re.I)
_MIND_CHANGE = re.compile(
    r"(?=[cornud])\b(changed? my mind|on second thought|roll (?:it |that |my \w+ )?back"
    r"|undo (?:it|that|the)|(?:no longer|don['’]?t) want to (?:proceed|go ahead|keep))",
    re.I,
)
_INSTRUCTED_CHANGE = re.compile(r"\b(regret|change (?:your|of) mind|changes? (?:your|her|his) mind|rethink)", re.I)
_DONT_HAVE = re.compile(
    r"(?=[dcfln])(?:\b(don['’]?t|do not|can['’]?t|cannot) (?:have|remember|recall|find|know)"
    r"|(?:forgot|lost) (?:my|it)|not (?:with me|handy|sure what))",
    re.I,
)
_OTHER_ID = re.compile(r"(?=[robc])\b(reservation|order|booking|confirmation) (?:id|number|code)\b", re.I)


# A word each pattern cannot match without (lower case): ASCII text holding none is not searched.
_LEAVING_WORDS = (
    "bye",
    "talk ",
    "get back to you",
    "be in touch",
    "reach out ",
    "ll ",
    "that's",
    "thats",
    "nothing else",
    "have a ",
)
_REFUSAL_WORDS = (
    "unable to",
    "cannot",
    "can not",
    "can't",
    "not able",
    "not eligible",
    "possible",
    "unfortunately",
    "sorry, but",
    "against ",
    "allow",
    " contact",
    "transfer",
    "human agent",
)
_MIND_CHANGE_WORDS = ("my mind", "on second thought", "roll ", "undo ", "want to ")
_DONT_HAVE_WORDS = (" have", " remember", " recall", " find", " know", "forgot ", "lost ", "not ")


def _may(text: str, words: tuple[str, ...]) -> bool:
    """Whether a pattern may match: always for text beyond ASCII (case folding is the
    pattern's there), else when one of its ``words`` stands in the lower-cased text."""
    if not text.isascii():
        return True
    low = text.lower()
    return any(w in low for w in words)


def leaves(text: str) -> bool:
    """The message ends the conversation (a goodbye, "I'll get back to you")."""
    return _may(text, _LEAVING_WORDS) and bool(_LEAVING.search(text))


def refuses(text: str) -> bool:
    """The agent refuses, or sends the user elsewhere."""
    return _may(text, _REFUSAL_WORDS) and bool(_REFUSAL.search(text))


_HUMAN_WORDS = ("human", "person", "transfer", "supervisor", "manager", "representative", "agent", "someone")


def asks_for_human(text: str) -> bool:
    """The user asks for a person."""
    low = text.lower()
    return any(w in low for w in _HUMAN_WORDS) and bool(_ASKS_HUMAN.search(text))


def takes_back(text: str) -> bool:
    """The user takes back what it confirmed."""
    return _may(text, _MIND_CHANGE_WORDS) and bool(_MIND_CHANGE.search(text))


READ_PREFIXES = (
    "get_",
    "search_",
    "list_",
    "find_",
    "check_",
    "lookup",
    "look_up",
    "fetch_",
    "read_",
    "query_",
    "show_",
    "view_",
    "calculate",
    "think",
    "can_",
    "run_speed_test",
)

# -- facts: ids, emails, dates, amounts ----------------------------------------

_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        )
    )
}
_MONTH_NAMES = list(_MONTHS)
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_DATE_NAMED = re.compile(  # a month's name (possessive, as _ID_KINDS below)
    r"(?=[A-Za-z])\b([A-Za-z]{3,9}+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(\d{4}))?\b"
)
_DIGIT = re.compile(r"\d")
_DATE_ISO = re.compile(r"(?=\d)\b(\d{4})-(\d{2})-(\d{2})\b")
# The three kinds of id (a user id, an order number, an email), one alternation (possessive
# quantifiers, ``++``, where giving a letter or a digit back can never lead to a match). A text is searched
# for the kinds it may hold (a user id needs "_" and three digits, an order "#W", an email "@"), in
# this order: the same matches, as a kind that cannot match anywhere changes nothing.
_ID_KINDS = (
    r"(?=[A-Za-z])\b[A-Za-z]++(?:_[A-Za-z]++)++_\d{3,}+\b",
    r"#W\d{5,}\b",
    r"[\w.]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}\b",
)
_USER_ID_HINT = re.compile(r"_\d{3}")
_CODE = re.compile(r"(?=[A-Z0-9])\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b")  # reservation-style codes
_MONTH_HINT = re.compile("|".join(m[:3] for m in _MONTH_NAMES))  # every month's name _DATE_NAMED reads holds one
_DATE_AS_FACT = re.compile(r"(?:(\d{4})-)?(\d{2})-(\d{2})")
_DEVICE_MARK = "[on their own device:"
_CODE_HINT = re.compile(r"[A-Z0-9]{6}")  # every code is six of these in a row
_ISO_HINT = re.compile(r"\d-\d")  # every ISO date holds one
_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_RUN = b"0" * 19  # 19 digits in a row: an integer orjson would read otherwise than json
_AMOUNT = re.compile(r"(?=[$\d])(?<![\w.-])\$?(\d{1,3}(?:,\d{3})+|\d{3,})(?:\.(\d{1,2}))?(?![\w-])(?!\s*%)")
_USER_ID = re.compile(r"\b[a-z]+(?:_[a-z]+)+_\d{3,}\b")
_EMAIL = re.compile(r"\b[a-z][a-z0-9._]*@[a-z0-9.-]+\.[a-z]{2,}\b", re.I)
_DEVICE_TEXT = re.compile(r"\[on their own device:.*?\]", re.S)
_DEVICE = re.compile(r"\[on their own device: (\w+)\((.*?)\) -> (.*?)\]", re.S)
_FAILED = re.compile(r"^\s*(error|failed|failure|cannot|can['’]t|unable)\b", re.I)
_ARGS_JSON = json.JSONEncoder(ensure_ascii=False, default=str)  # json.dumps(x, ensure_ascii=False, default=str)
_WORDING = re.compile(r"[A-Za-z ,'-]+")  # a wording the reference may need (reference_unstated_choice)
_TIME = re.compile(r"current time is (\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}(?::\d{2})?)", re.I)


@lru_cache(maxsize=8)
def _id_pattern(kinds: tuple[bool, bool, bool]) -> re.Pattern[str]:
    """The alternation of the id kinds ``kinds`` marks as possible (all three: every id)."""
    return re.compile("|".join(k for k, on in zip(_ID_KINDS, kinds, strict=True) if on))


def _norm_dates(text: str) -> set[str]:
    out: set[str] = set()
    for m in _DATE_NAMED.finditer(text):
        month, day = _MONTHS.get(m.group(1).lower(), 0), int(m.group(2))
        if month and 1 <= day <= 31:
            out.add(f"{m.group(3)}-{month:02d}-{day:02d}" if m.group(3) else f"{month:02d}-{day:02d}")
    for m in _DATE_ISO.finditer(text):
        out.add(f"{m.group(1)}-{m.group(2)}-{m.group(3)}")
        out.add(f"{m.group(2)}-{m.group(3)}")
    return out


def facts(text: str) -> set[str]:
    """The checkable facts a message states: ids, emails, reservation codes,
    dates (normalised to MM-DD / YYYY-MM-DD) and amounts of three digits or
    more (commas dropped, a percentage is none), each lower-cased."""
    text = text[:MAX_TEXT]
    if _DIGIT.search(text) is None:  # every fact but an email holds a digit
        if "@" not in text:
            return set()
        return {m.group(0).lower() for m in _id_pattern((False, False, True)).finditer(text)}
    taken: list[tuple[int, int]] = []  # spans an amount may not come from
    out: set[str] = set()
    kinds = (_USER_ID_HINT.search(text) is not None, "#W" in text, "@" in text)
    if any(kinds):
        for m in _id_pattern(kinds).finditer(text):
            out.add(m.group(0).lower())
            taken.append(m.span())
    for m in _CODE.finditer(text) if _CODE_HINT.search(text) else ():
        out.add(m.group(0).lower())
        taken.append(m.span())
    for m in _DATE_NAMED.finditer(text) if _MONTH_HINT.search(text.lower()) else ():
        month, day = _MONTHS.get(m.group(1).lower(), 0), int(m.group(2))
        if month and 1 <= day <= 31:
            out.add(f"{m.group(3)}-{month:02d}-{day:02d}" if m.group(3) else f"{month:02d}-{day:02d}")
            taken.append(m.span())
    if "-" in text and _ISO_HINT.search(text):
        for m in _DATE_ISO.finditer(text):
            out.add(f"{m.group(1)}-{m.group(2)}-{m.group(3)}")
            taken.append(m.span())
    for m in _AMOUNT.finditer(text):
        if taken:
            start = m.start()
            if any(a <= start < b for a, b in taken):
                continue
        whole = m.group(1).replace(",", "")
        out.add(whole if not m.group(2) or set(m.group(2)) == {"0"} else f"{whole}.{m.group(2)}")
    return out


def _known(fact: str, text: str, known: set[str]) -> bool:
    if fact in known or fact in text:
        return True
    m = _DATE_AS_FACT.fullmatch(fact)
    if m is None:
        return False
    if m.group(1) is None and ("-" + fact in text or any(k.endswith("-" + fact) for k in known)):
        return True  # a date without a year: any year's
    month = _MONTH_NAMES[int(m.group(2)) - 1] if 1 <= int(m.group(2)) <= 12 else ""
    day = str(int(m.group(3)))
    return (
        bool(month)
        and any(
            _said_date(text, f"{name}{dot} {day}")  # said in words before
            for name in (month, month[:3])
            for dot in ("", ".")
        )
    )


def _said_date(text: str, words: str) -> bool:
    """``words`` ("may 24") stand in ``text`` as a whole date ("may 24th," yes; "may 245" no)."""
    at = text.find(words)
    while at >= 0:
        before = text[at - 1] if at else " "
        rest = text[at + len(words) : at + len(words) + 3]
        rest = rest[2:] if rest[:2] in ("st", "nd", "rd", "th") else rest
        if not before.isalnum() and not (rest[:1].isalnum()):
            return True
        at = text.find(words, at + 1)
    return False


# -- the result ----------------------------------------------------------------


@dataclass
class Finding:
    """One detector's finding: who it points at, where, and the quoted message."""

    detector: str
    who: str
    confidence: float
    at: int | None  # index in the trajectory's messages (None: no message)
    quote: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "who": self.who,
            "confidence": self.confidence,
            "at": self.at,
            "quote": self.quote,
            "detail": self.detail,
        }


@dataclass
class Blame:
    """The blame of one failed conversation and what else was found."""

    blame: str
    confidence: float
    detector: str
    evidence: str  # the detail and the quoted message, one line
    at: int | None
    quote: str
    findings: list[Finding] = field(default_factory=list)  # every finding, the blamed one first
    notes: list[Finding] = field(default_factory=list)  # recorded, never a blame (too cooperative)

    def to_dict(self) -> dict[str, Any]:
        return {
            "blame": self.blame,
            "confidence": self.confidence,
            "detector": self.detector,
            "evidence": self.evidence,
            "at": self.at,
            "quote": self.quote,
            "findings": [f.to_dict() for f in self.findings],
            "notes": [n.to_dict() for n in self.notes],
        }


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 1] + "…"


@lru_cache(maxsize=4096)
def is_write(name: str) -> bool:
    """A state-changing tool by its name (reads: get_, search_, list_, find_, check_, …)."""
    return not name.lower().startswith(READ_PREFIXES)


# -- the conversation as the detectors read it -------------------------------


@dataclass
class _View:
    traj: Trajectory
    case: Case | None
    instructions: str
    policy_time: datetime | None
    bags: dict[str, dict[str, int]]  # free checked bags per passenger, by membership and cabin (the policy's)
    expected_user_actions: list[str]
    messages: list[tuple[int, str, str, int]]  # (index, role, text, calls_before)
    missing_writes: list[int]  # expected steps (writes) not done
    wrong_write: tuple[int, str] | None  # (call index, why): the agent's first write the reference does not hold
    wrong_fields: tuple[str, ...]  # the fields of that write the reference holds otherwise (none: not held at all)
    steps_done: bool
    failures: Sequence[str]
    _users: list[tuple[int, str, int]] | None = None
    _agent: list[tuple[int, str, int]] | None = None
    _said: tuple[str, bool] | None = None
    _facts: dict[int, set[str]] = field(default_factory=dict)

    def message_facts(self, at: int, text: str) -> set[str]:
        """``facts(text)`` of message ``at`` (read once; not to be changed)."""
        found = self._facts.get(at)
        if found is None:
            found = self._facts[at] = facts(text)
        return found

    def user_messages(self) -> list[tuple[int, str, int]]:
        if self._users is None:
            self._users = [(i, t, c) for i, r, t, c in self.messages if r == "user"]
        return self._users

    def said(self) -> str:
        """Everything the user says, lower-cased, in one text (built once)."""
        return self._said_and_ascii()[0]

    def said_ascii(self) -> bool:
        """Whether everything the user says is ASCII."""
        return self._said_and_ascii()[1]

    def _said_and_ascii(self) -> tuple[str, bool]:
        if self._said is None:
            joined = " ".join(t for _, t, _ in self.user_messages())
            self._said = (joined.lower(), joined.isascii())
        return self._said

    def agent_messages(self) -> list[tuple[int, str, int]]:
        if self._agent is None:
            self._agent = [(i, t, c) for i, r, t, c in self.messages if r == "assistant"]
        return self._agent

    def message_before_call(self, call: int) -> int | None:
        """The index of the last message said before call ``call``."""
        last = None
        for i, _, _, before in self.messages:
            if before <= call:
                last = i
        return last

    def calls_before_message(self, at: int) -> int:
        for i, _, _, before in self.messages:
            if i == at:
                return before
        return len(self.traj.calls)


def _instructions(case: Case | None, noted: str) -> str:
    """The simulated user's instructions: an importer's note (``noted``, "" without one), or
    ToolLens's own user (its instruction and the facts it knows)."""
    if noted or case is None or case.user is None:
        return noted
    known = " | ".join(f"{k}: {v}" for k, v in list(case.user.known.items())[:50])
    return f"{case.user.instruction} | {known}" if known else case.user.instruction


@lru_cache(maxsize=512)
def _read_notes(
    notes: tuple[str, ...],
) -> tuple[str, datetime | None, tuple[str, ...], dict[str, dict[str, int]]]:
    """What a case's notes tell the blame, read once per case (not per trial): the user's
    instructions, the policy's current time, the actions the user must take on its device,
    the policy's free checked bags."""
    return (
        _notes_value(notes, INSTRUCTIONS_NOTE),
        _policy_time(_notes_value(notes, POLICY_TIME_NOTE)),
        tuple(m.group(1) for n in notes for m in [USER_ACTION_NOTE.match(n)] if m is not None),
        _read_bags(_notes_value(notes, BAGS_NOTE)),
    )


_BAGS_TIER = re.compile(r"\bif the booking user is an? (\w+) member\b", re.I)
_BAGS_CABIN = re.compile(r"\b(\d+) free checked bags? for each (basic economy|economy|business) passenger", re.I)
_BAGS_NOTED = re.compile(r"(\w+): ((?:\w+=\d+ ?)+)")
_BAGS_PAIR = re.compile(
    r"([a-z_]+)=(\d+)", re.I
)  # a cabin and its free bags (a hand-written note may run them together)


def bag_allowance_note(policy: Any) -> str | None:
    """The free checked bags an airline policy gives per passenger, by the booking user's membership and
    the cabin, as a ``policy bags:`` note's value ("regular: basic_economy=0 economy=1 business=2 | …");
    None when the policy states none. Read from the policy's own sentences ("If the booking user is a
    gold member, 2 free checked bag for each basic economy passenger, …"), in prose or as a list."""
    if not isinstance(policy, str):
        return None
    text = policy[:100_000]
    tiers = list(_BAGS_TIER.finditer(text))
    parts = []
    for k, m in enumerate(tiers):
        end = tiers[k + 1].start() if k + 1 < len(tiers) else min(len(text), m.end() + 600)
        cabins = {
            c.group(2).lower().replace(" ", "_"): int(c.group(1)) for c in _BAGS_CABIN.finditer(text, m.end(), end)
        }
        if cabins:
            parts.append(f"{m.group(1).lower()}: " + " ".join(f"{c}={n}" for c, n in cabins.items()))
    return " | ".join(parts) or None


def _read_bags(noted: str) -> dict[str, dict[str, int]]:
    """A ``policy bags:`` note read back: {membership: {cabin: free bags per passenger}}."""
    out: dict[str, dict[str, int]] = {}
    for m in _BAGS_NOTED.finditer(noted):
        out[m.group(1)] = {c: int(n) for c, n in _BAGS_PAIR.findall(m.group(2))}
    return out


def _notes_value(notes: tuple[str, ...], prefix: str) -> str:
    for note in notes:
        if note.startswith(prefix):
            return note[len(prefix) :]
    return ""


def _policy_time(noted: str) -> datetime | None:
    m = _TIME.search(noted)
    if m is None:
        return None
    try:
        return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}")
    except ValueError:
        return None


def _view(traj: Trajectory, case: Case | None, score: Any) -> _View:
    expected = case.expected_calls if case is not None and case.expected_calls is not None else []
    undone = set(getattr(score, "missing_steps", []) or []) | set(getattr(score, "undone_steps", []) or [])
    undone |= {cs.step for cs in getattr(score, "calls", []) or [] if cs.mismatches and cs.step is not None}
    missing = [j for j in sorted(undone) if j < len(expected) and is_write(expected[j].name)]
    wrong: tuple[int, str] | None = None
    wrong_fields: tuple[str, ...] = ()
    # a reference that expects no write at all (an empty list, not none) holds no write either
    referenced = bool(expected) or (case is not None and case.expected_calls is not None)
    for cs in getattr(score, "calls", []) or []:
        if not (cs.done and is_write(cs.name)):
            continue
        if cs.step is None and referenced:
            wrong = (cs.index, f"{cs.name} is a write the reference does not hold")
        elif cs.mismatches:
            wrong_fields = tuple(m.field for m in cs.mismatches)
            wrong = (cs.index, f"{cs.name} with values the reference does not hold ({', '.join(wrong_fields[:3])})")
        if wrong is not None:
            break
    msgs = [(i, m.role, m.content[:MAX_TEXT], m.calls_before) for i, m in enumerate((traj.messages or [])[:MAX_SCAN])]
    notes = _read_notes(tuple(case.notes) if case is not None else ())
    return _View(
        traj,
        case,
        _instructions(case, notes[0]),
        notes[1],
        notes[3],
        list(notes[2]),
        msgs,
        missing,
        wrong,
        wrong_fields,
        bool(expected) and not undone,
        list(getattr(score, "failures", []) or []),
    )


# -- user detectors ------------------------------------------------------------


def early_stop(v: _View) -> Finding | None:
    """The user ends the conversation while a write the reference expects is
    neither done nor refused: a stop token in the very message that asks for
    writes, a ``###TRANSFER###`` the agent never made, or a goodbye after an
    agent message that refused nothing."""
    if not v.missing_writes and not v.expected_user_actions:
        return None
    users = v.user_messages()
    if not users:
        return None
    transferred = any(c.name == "transfer_to_human_agents" for c in v.traj.calls)
    for i, text, _ in users:
        if TRANSFER_TOKEN in text and not transferred:
            return Finding(
                "early_stop",
                USER,
                0.85,
                i,
                _quote(text),
                "the user ends with ###TRANSFER### though the agent never transferred",
            )
        if "###" in text and any(t in text for t in STOP_TOKENS) and _REQUEST.search(text) and v.missing_writes:
            return Finding(
                "early_stop",
                USER,
                0.85,
                i,
                _quote(text),
                "the user asks for writes and ends the conversation in the same message",
            )
    if not v.missing_writes:
        return None
    agent = v.agent_messages()
    writes = _write_calls(v)
    last_write = max(writes, default=-1)
    leaving = next(((i, text) for i, text, before in users if before > last_write and leaves(text)), None)
    if leaving is None:
        return None
    i, text = leaving
    if any(refuses(t) for _, t, _ in agent):
        return None  # the agent refused something: leaving is the user's right
    if any(j < i and leaves(t) for j, t, _ in agent):
        return None  # the agent said goodbye first
    return Finding(
        "early_stop",
        USER,
        0.7,
        i,
        _quote(text),
        "the user leaves while an expected write is not done and nothing was refused",
    )


def _write_calls(v: _View) -> list[int]:
    return [i for i, c in enumerate(v.traj.calls) if is_write(c.name) and c.error is None]


_DONT_HAVE_ES = re.compile(r"\bno (?:lo |la )?(?:tengo|recuerdo|encuentro|s[eé])\b", re.I)


def _own_withholds(v: _View) -> Finding | None:
    """ToolLens's own simulated user: the agent asks for a fact the user knows
    (``user.known``), and the user never says it: says it does not have it, or
    ignores two asks."""
    spec = v.case.user if v.case is not None else None
    if spec is None:
        return None
    users = v.user_messages()
    for name, value in spec.known.items():
        if any(says_value(value, t) for _, t, _ in users):
            continue
        asks = [i for i, t, _ in v.agent_messages() if asked_for(name, t)]
        if not asks:
            continue
        replies = [(i, t) for i, t, _ in users if i > asks[0]]
        found = _unanswered(asks, replies, _denies)
        if found is not None:
            return Finding(
                "withholds",
                USER,
                0.7,
                found[0],
                _quote(found[1]),
                f"asked {len(asks)} time(s) for {name}, which the user knows ({value}), the user never says it",
            )
    return None


def _denies(text: str) -> bool:
    """A reply of ToolLens's own user saying it does not have a fact (Spanish or English)."""
    return bool(_DONT_HAVE_ES.search(text) or (_may(text, _DONT_HAVE_WORDS) and _DONT_HAVE.search(text)))


def _denies_kind(words: tuple[str, ...], text: str) -> bool:
    """A reply denying this kind of fact (``words`` name it), not another one asked in the same breath."""
    return bool(
        _may(text, _DONT_HAVE_WORDS)
        and _DONT_HAVE.search(text)
        and (any(w in text.lower() for w in words) or not _OTHER_ID.search(text))
    )


def _unanswered(
    asks: list[int], replies: list[tuple[int, str]], denies: Callable[[str], bool]
) -> tuple[int, str] | None:
    """Where a fact asked for (at ``asks``) went unsaid: the first reply that ``denies`` having it,
    else, after two asks or more, the first reply (or the first ask); None after one ask unanswered."""
    denial = next(((i, t) for i, t in replies if denies(t)), None)
    if denial is None and len(asks) < 2:
        return None
    return denial or (replies[0] if replies else (asks[0], ""))


def withholds(v: _View) -> Finding | None:
    """The agent asks for the user id (or email) its instructions hold, and
    the user never gives it: says it does not have it, or ignores two asks.
    For ToolLens's own simulated user, any fact it knows (``_own_withholds``)."""
    if v.case is not None and v.case.user is not None:
        return _own_withholds(v)
    if not v.instructions:
        return None
    said: str | None = None
    agent: list[tuple[int, str]] | None = None
    for held, words in zip(
        _held_ids(v.instructions), (("user id", "user_id", "userid"), ("email", "e-mail")), strict=True
    ):
        if not held:
            continue
        said = v.said() if said is None else said
        if any(h in said for h in held):
            continue
        agent = [(i, t.lower()) for i, t, _ in v.agent_messages()] if agent is None else agent
        asks = [i for i, t in agent if any(w in t for w in words)]
        if not asks:
            continue
        replies = [(i, t) for i, t, _ in v.user_messages() if i > asks[0]]
        # a denial counts when it is about this kind of fact, not another one asked in the same breath
        found = _unanswered(asks, replies, partial(_denies_kind, words))
        if found is not None:
            return Finding(
                "withholds",
                USER,
                0.7,
                found[0],
                _quote(found[1]),
                f"asked {len(asks)} time(s) for {words[0]}, which its instructions give ({held[0]}), "
                "the user never says it",
            )
    return None


def unfounded_fact(v: _View) -> Finding | None:
    """The user states an id, email, date or amount that neither its
    instructions nor anything said or returned before holds."""
    if not v.instructions:
        return None
    instructions = _searchable(v.instructions)
    held = _facts_of(v.instructions)
    # the facts the instructions do not hold already: most conversations have none, and stop here
    stated = [
        (i, text, f)
        for i, text, _ in v.user_messages()
        if (f := {x for x in _user_facts(v, i, text) if not _known(x, instructions, held)})
    ]
    if not stated:
        return None
    # the text so far, lower-cased, commas dropped (bounded: past MAX_HAY, facts only), in pieces
    # joined only where a stated fact is looked up (not copied whole at every message)
    hay = [instructions]
    size = [len(instructions)]
    known = set(held)

    def add(text: str, said: bool = False) -> None:  # what later messages may lean on, once, in order
        text = text[:MAX_TEXT]
        if size[0] < MAX_HAY:
            piece = "\n" + text.lower().replace(",", "")
            hay.append(piece)
            size[0] += len(piece)
        elif said:  # past the bound, dates said in words are still read
            known.update(_norm_dates(text))

    calls = v.traj.calls
    next_call = 0
    todo = iter(stated)
    at, text, candidates = next(todo)
    for i, _, said, before in v.messages:
        while next_call < min(before, len(calls)):
            c = calls[next_call]
            add(_ARGS_JSON.encode(c.arguments))
            if c.observation:
                add(c.observation)
            next_call += 1
        if i == at:
            hay[:] = ["".join(hay)]
            new = sorted(f[:60] for f in candidates if not _known(f, hay[0], known))
            if new:
                return Finding(
                    "unfounded_fact",
                    USER,
                    0.7,
                    i,
                    _quote(text),
                    f"the user states {', '.join(new[:3])}, which neither its instructions nor the "
                    "conversation so far holds",
                )
            nxt = next(todo, None)
            if nxt is None:
                return None
            at, text, candidates = nxt
        add(said, said=True)
    return None


def _user_facts(v: _View, at: int, text: str) -> set[str]:
    """The facts a user message states, what it did on its own device left out."""
    return facts(_DEVICE_TEXT.sub(" ", text)) if _DEVICE_MARK in text else v.message_facts(at, text)


@lru_cache(maxsize=1024)
def _instructed(instructions: str, what: str) -> bool:
    """The instructions script a request for a human (``human``) or a change of mind (``change``)."""
    return bool((_INSTRUCTED_HUMAN if what == "human" else _INSTRUCTED_CHANGE).search(instructions))


@lru_cache(maxsize=512)
def _held_ids(instructions: str) -> tuple[list[str], list[str]]:
    """The user ids and the emails a case's instructions hold."""
    return (
        [m.group(0).lower() for m in _USER_ID.finditer(instructions)],
        [m.group(0).lower() for m in _EMAIL.finditer(instructions)],
    )


@lru_cache(maxsize=512)
def _searchable(instructions: str) -> str:
    """A case's instructions lower-cased, commas dropped (once per case, not per trial)."""
    return instructions.lower().replace(",", "")


@lru_cache(maxsize=512)
def _facts_of(instructions: str) -> set[str]:
    """The facts of a case's instructions (read once per case, not per trial)."""
    return facts(instructions)


def asks_human(v: _View) -> Finding | None:
    """The user asks for a human though its instructions never mention one
    and the agent did not just offer a transfer."""
    if not v.instructions or _instructed(v.instructions, "human"):
        return None
    if not any(w in v.said() for w in _HUMAN_WORDS):
        return None  # no message names a person (asks_for_human's own first test, once)
    last_agent = ""
    for i, role, text, _ in v.messages:
        if role == "assistant":
            last_agent = text
        elif role == "user" and asks_for_human(text) and not _OFFERS_TRANSFER.search(last_agent):
            return Finding(
                "asks_human",
                USER,
                0.75,
                i,
                _quote(text),
                "the user asks for a human, which its instructions never mention",
            )
    return None


def changes_mind(v: _View) -> Finding | None:
    """After a write it confirmed, the user takes it back, and its
    instructions script no change of mind: the confirmation was the fault."""
    if not v.instructions or _instructed(v.instructions, "change"):
        return None
    if v.said_ascii() and not any(w in v.said() for w in _MIND_CHANGE_WORDS):
        return None  # no message may take anything back (takes_back's own first test, once)
    writes = _write_calls(v)
    for i, text, before in v.user_messages():
        if not writes or writes[0] >= before or not takes_back(text):  # no write done before it, or no taking back
            continue
        confirm = v.message_before_call(max(c for c in writes if c < before))
        while confirm is not None and v.messages[confirm][1] != "user":
            confirm -= 1
        at = confirm if confirm is not None else i
        return Finding(
            "changes_mind",
            USER,
            0.7,
            at,
            _quote(v.messages[at][2]),
            f"the user confirms a write, then takes it back: {_quote(text)[:120]}",
        )
    return None


# -- a request outside the scenario ------------------------------------------------

# The kinds of write a user may ask for, told from the tool's name (first that fits), and the words that
# ask for one. Verbs, where the act has one: "cancel" (not "cancellation": the cancellation policy, the
# cancellation reason name no request), "book" (not "booking": a booking is the reservation).
_WRITE_KINDS: tuple[tuple[str, str, str], ...] = (
    ("cancel", "cancellation", r"cancel(?:s|led|ed|ling|ing)?"),
    ("book", "new booking", r"(?:book(?:s|ed)?|reserve[sd]?|purchase[sd]?|buy|bought)"),
    ("bag", "bags", r"(?:bag(?:s|gage|gages)?|luggage|suitcases?)"),
    ("passenger", "passengers", r"passengers?"),
    ("exchange", "exchange", r"(?:exchang(?:e|es|ed|ing)|swap(?:s|ped|ping)?)"),
    ("return", "return", r"return(?:s|ed|ing)?"),
    ("certificate", "compensation", r"(?:certificates?|vouchers?|compensat\w*)"),
    (
        "flight",
        "flight change",
        r"(?:chang(?:e|es|ed|ing)|modif(?:y|ies|ied|ying)|mov(?:e|es|ed|ing)|switch(?:es|ed|ing)?"
        r"|re(?:book|schedul)\w*|upgrad(?:e|es|ed|ing)|downgrad(?:e|es|ed|ing)|delay(?:s|ed|ing)?|postpon\w*)",
    ),
    ("modify", "change", r"(?:chang(?:e|es|ed|ing)|modif(?:y|ies|ied|ying)|updat(?:e|es|ed|ing)|switch(?:es|ed|ing)?)"),
    ("update", "change", r"(?:chang(?:e|es|ed|ing)|modif(?:y|ies|ied|ying)|updat(?:e|es|ed|ing)|switch(?:es|ed|ing)?)"),
)
# what asks: a request ("can you", "please", "I'd like to", "let's", ...) with the kind's word a few words
# after it in the same sentence, not past a word that makes it a question about the state ("I'd like to know
# if it was cancelled", "could you tell me whether ..."); or, for a kind named by its verb, that verb opening
# a sentence or a clause, an imperative ("Fine, then book me ..."), not a past form ("..., cancelled by")
_ASK_REQUEST = (
    r"\b(?:(?:can|could|would|will) you|please|i['’]?d (?:like|love|prefer|rather)|i would (?:like|rather)"
    r"|i (?:want|need|wish)|let['’]?s|let us|help me|go ahead and)\b"
    r"(?:(?!\b(?:if|whether|know|tell|status|check|why|when|how|what)\b)[^.!?\n]){0,40}?\b"
)
_ASK_IMPERATIVE = r"(?:^|[.!?;:,]\s*)(?:(?:then|just|so|ok(?:ay)?|fine|actually|instead|now)\b[ ,]*)*(?!\w*ed\b)"
_OBJECT_KINDS = frozenset({"bag", "passenger", "certificate"})  # named by what the write changes, not its verb


def _name_words(tool: str) -> list[str]:
    """A tool name's words (``cancel_reservation``, ``cancelReservation``: cancel, reservation)."""
    return re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", tool).lower())


def write_kind(tool: str) -> str | None:
    """The kind of write a tool makes, told from its name's words: its verb (``cancel_reservation``:
    cancel; ``update_address_book``: update, not a booking) or what it changes (``update_reservation_
    baggages``: bags), or None."""
    if not is_write(tool) or "transfer" in tool.lower():
        return None
    words = _name_words(tool)
    if not words:
        return None
    verb, rest = words[0], words[1:]
    if verb in ("update", "modify", "change") and any(w.startswith("flight") for w in rest):
        return "flight"
    for kind, _, _ in _WRITE_KINDS:
        if any(w.startswith(kind) for w in rest) if kind in _OBJECT_KINDS else verb == kind:
            return kind
    return None


@lru_cache(maxsize=32)
def _kind_words(kind: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The words of a kind of write, and a request for it."""
    words = next(w for k, _, w in _WRITE_KINDS if k == kind)
    ask = _ASK_REQUEST if kind in _OBJECT_KINDS else f"(?:{_ASK_REQUEST}|{_ASK_IMPERATIVE})"
    return re.compile(rf"\b{words}\b", re.I), re.compile(rf"{ask}{words}\b", re.I)


@lru_cache(maxsize=1024)
def instructions_give(instructions: str, kind: str) -> bool:
    """The user's instructions name a write of this kind (its verb, or its object for bags,
    passengers and compensation)."""
    return bool(_kind_words(kind)[0].search(instructions))


def asks_write(text: str, kind: str) -> bool:
    """The message asks for a write of this kind."""
    words, ask = _kind_words(kind)
    return bool(words.search(text)) and bool(ask.search(text))


def asks_outside(instructions: str, text: str, tool: str) -> bool:
    """The message asks for the write ``tool`` makes, which the instructions do not give."""
    kind = write_kind(tool)
    return kind is not None and not instructions_give(instructions, kind) and asks_write(text, kind)


def outside_scenario(v: _View) -> Finding | None:
    """The user asks for a write its instructions do not give (cancel, book, change, bags, ...), and the
    agent's first write the reference does not hold is that request: the user went outside its scenario.
    Less sure (0.55) when the agent had proposed that kind of write before the user asked for it."""
    if not v.instructions or v.wrong_write is None or v.wrong_fields or v.case is None:
        return None
    call = v.wrong_write[0]
    tool = v.traj.calls[call].name
    kind = write_kind(tool)
    if kind is None or instructions_give(v.instructions, kind):
        return None
    expected = v.case.expected_calls or []
    if any(s.name == tool for s in expected):
        return None  # the reference holds that write (with other values): not a request outside the scenario
    if v.missing_writes:
        # it stands in for an expected write the agent never made (on that order or reservation, or a new
        # booking for a change refused): whether the user strayed or the agent steered it there (refused the
        # expected write) the text cannot tell
        return None
    words = _kind_words(kind)[0]
    for i, text, before in v.user_messages():
        if before > call:
            break
        if asks_write(text, kind):
            offered = any(j < i and words.search(t) for j, t, _ in v.agent_messages())
            label = next(n for k, n, _ in _WRITE_KINDS if k == kind)
            return Finding(
                "outside_scenario",
                USER,
                0.55 if offered else 0.65,
                i,
                _quote(text),
                f"the user asks for a {label} its instructions never give, and the agent's {tool}, a write "
                "the reference does not hold, is that request"
                + (" (the agent had proposed it first)" if offered else ""),
            )
    return None


_TRIP = re.compile(r"\b(round[- ]trip|one[- ]way)\b", re.I)


def unfounded_trip_type(v: _View) -> Finding | None:
    """The user states a trip type (round trip, one way) that neither its instructions nor anything
    returned or stated before holds (an agent's question naming both is no statement), and the agent's
    first wrong write carries it as its ``flight_type``, where the reference's write of that tool holds
    another."""
    if not v.instructions or v.wrong_write is None or v.case is None:
        return None
    call = v.traj.calls[v.wrong_write[0]]
    written = call.arguments.get("flight_type") if isinstance(call.arguments, dict) else None
    held = {
        s.arguments.get("flight_type")
        for s in v.case.expected_calls or ()
        if s.name == call.name and isinstance(s.arguments, dict)
    }
    if not isinstance(written, str) or not held or written in held or _TRIP.search(v.instructions):
        return None
    for i, role, text, before in v.messages:
        if role == "assistant":
            said = {m.group(1).lower()[:3] for m in _TRIP.finditer(text)}
            if len(said) == 1 and written.startswith(next(iter(said))):
                return None  # the agent stated it first
            continue
        if role != "user":
            continue
        stated = {m.group(1).lower().replace("-", "_").replace(" ", "_") for m in _TRIP.finditer(text)}
        if stated != {written}:
            continue
        if any(f'"flight_type": "{written}"' in (c.observation or "") for c in v.traj.calls[:before]):
            return None  # a reservation the agent read holds it
        return Finding(
            "unfounded_fact",
            USER,
            0.6,
            i,
            _quote(text),
            f"the user states the trip type {written}, which its instructions do not hold, and the agent "
            "writes it where the reference holds another",
        )
    return None


def user_action_missing(v: _View) -> tuple[Finding | None, Finding | None]:
    """τ² telecom: an action the user must take on its own device is never
    made (or failed). The user's fault when the agent asked for it; the
    agent's when it never did (second element)."""
    if not v.expected_user_actions:
        return None, None
    done: set[str] = set()
    for _, text, _ in v.user_messages():
        for m in _DEVICE.finditer(text):
            if not _FAILED.match(m.group(3)):
                done.add(m.group(1))
    for name in v.expected_user_actions:
        if name in done:
            continue
        words = [w for w in name.split("_") if w not in ("toggle", "set", "check", "reset", "get", "make", "run")]
        asked = [(i, t) for i, t, _ in v.agent_messages() if name in t or any(_asks_action(w).search(t) for w in words)]
        if asked:
            i, t = asked[0]
            return Finding(
                "user_action_missing",
                USER,
                0.75,
                i,
                _quote(t),
                f"the agent asks for {name}, which the user's instructions need, and the user never makes it",
            ), None
        return None, Finding(
            "user_action_missing",
            AGENT,
            0.6,
            None,
            "",
            f"the user must call {name} on its own device; the agent never asks for it",
        )
    return None, None


@lru_cache(maxsize=256)
def _asks_action(word: str) -> re.Pattern[str]:
    """The agent asking the user to turn ``word`` on (compiled once per word)."""
    return re.compile(
        rf"\b(?:turn on|switch on|enable|toggle|activate)\b[^.\n]{{0,40}}\b{word}\b[^.\n]{{0,60}}"
        r"\b(?:your (?:phone|device)|on your)",
        re.I,
    )


def too_cooperative(v: _View) -> Finding | None:
    """The first user message gives most of what the instructions hold
    (three facts or more, and at least half of them): recorded, never a blame."""
    users = v.user_messages()
    if not users or not v.instructions:
        return None
    held = _facts_of(v.instructions)
    if not held:
        return None
    first = v.message_facts(users[0][0], users[0][1]) & held
    if len(first) >= 3 and len(first) * 2 >= len(held):
        return Finding(
            "too_cooperative",
            USER,
            0.5,
            users[0][0],
            _quote(users[0][1]),
            f"the first message gives {len(first)} of the {len(held)} facts the instructions hold",
        )
    return None


# -- task detectors --------------------------------------------------------------


def _json_objects(text: str | None) -> list[dict[str, Any]]:
    """The objects of a tool's JSON output, two levels deep (a reservation; a list of
    flights; a list of connections, each a list of flights)."""
    if not text or text[:1] not in "[{":
        return []
    text = text[:200_000]
    value: Any = None
    raw = text.encode("utf-8", "surrogatepass")
    if _LONG_RUN not in raw.translate(_DIGITS_AS_ZERO):  # orjson reads long integers otherwise
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
    if value is None:  # what orjson refuses (NaN, a lone surrogate): the standard library's reading
        try:
            value = json.loads(text)
        except ValueError:
            return []
    out: list[dict[str, Any]] = []
    for item in value if isinstance(value, list) else [value]:
        for obj in item if isinstance(item, list) else [item]:
            if isinstance(obj, dict):
                out.append(obj)
                out.extend(f for f in obj.get("flights") or () if isinstance(f, dict))
    return out


def _needles(key: str, values: set[str]) -> tuple[str, ...]:
    """How a JSON text names one of ``values`` under ``key`` (with or without a space)."""
    return tuple(n for x in values for n in (f'"{key}": "{x}"', f'"{key}":"{x}"'))


def _reservations_and_flights(
    v: _View, wanted: set[str], numbers: set[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """The reservations named in ``wanted`` as the agent read them, and the routes of the
    flights in ``numbers`` it saw (only the outputs that name one are parsed)."""
    reservations: dict[str, dict[str, Any]] = {}
    flights: dict[str, tuple[str, str]] = {}
    needles = _needles("reservation_id", wanted) + _needles("flight_number", numbers)
    keys = (('"reservation_id":',) if wanted else ()) + (('"flight_number":',) if numbers else ())
    for c in v.traj.calls:
        obs = c.observation
        # every needle holds its key: an output naming neither key is not searched for each needle
        if not obs or not any(k in obs for k in keys) or not any(n in obs for n in needles):
            continue
        for obj in _json_objects(obs):
            if obj.get("reservation_id") in wanted and "flights" in obj:
                reservations.setdefault(obj["reservation_id"], obj)
            num, o, d = obj.get("flight_number"), obj.get("origin"), obj.get("destination")
            if num in numbers and isinstance(o, str) and isinstance(d, str):
                flights.setdefault(num, (o, d))
        if len(reservations) == len(wanted) and len(flights) == len(numbers):
            break  # each is kept as first read: later outputs change nothing
    return reservations, flights


_POLICY_STEPS = ("update_reservation_flights", "cancel_reservation", "update_reservation_baggages", "book_reservation")


def _against_policy(evidence: str) -> Finding:
    """The task's: its reference does what the policy forbids (the airline rule)."""
    return Finding("reference_against_policy", TASK, 0.8, None, "", evidence)


def reference_against_policy(v: _View) -> Finding | None:
    """Airline references the policy forbids: a flight change that moves the
    reservation's destination (origin, destination and trip type cannot
    change); a cancellation of an economy booking without insurance, made
    more than 24 hours before the policy's current time, whose flights the
    airline did not cancel; checked bags charged (``nonfree_baggages``) that
    the policy gives free (per passenger, by the booking user's membership and
    the cabin: the ``policy bags:`` note). Read from the reservations, flights
    and user profiles the agent looked up."""
    case = v.case
    if case is None or not any(s.name in _POLICY_STEPS for s in case.expected_calls or ()):
        return None
    wanted = {
        str(s.arguments.get("reservation_id"))
        for s in case.expected_calls or ()
        if isinstance(s.arguments, dict) and s.name in _POLICY_STEPS and s.name != "book_reservation"
    }
    numbers = {
        str(f.get("flight_number"))
        for s in case.expected_calls or ()
        if s.name == "update_reservation_flights" and isinstance(s.arguments, dict)
        for f in s.arguments.get("flights") or ()
        if isinstance(f, dict)
    }
    reservations, flights = _reservations_and_flights(v, wanted, numbers)
    cabins: dict[str, str] = {}  # the cabin the reference moves a reservation to, by the steps so far
    for step in case.expected_calls or ():
        args = step.arguments if isinstance(step.arguments, dict) else {}
        if step.name == "book_reservation" and v.bags:
            found = _bags_against_policy(v, args, None, "")
            if found is not None:
                return found
        res = reservations.get(str(args.get("reservation_id")))
        if res is None:
            continue
        if step.name == "update_reservation_baggages" and v.bags:
            found = _bags_against_policy(v, args, res, cabins.get(str(res.get("reservation_id")), ""))
            if found is not None:
                return found
        if step.name == "update_reservation_flights" and isinstance(args.get("cabin"), str):
            cabins[str(res.get("reservation_id"))] = args["cabin"]
        if step.name == "update_reservation_flights" and isinstance(args.get("flights"), list):
            routes = [flights.get(str(f.get("flight_number"))) for f in args["flights"] if isinstance(f, dict)]
            if routes and all(routes):
                ends = {a for r in routes if r for a in r}
                dest = res.get("destination")
                if isinstance(dest, str) and dest not in ends:
                    return _against_policy(
                        f"the reference changes reservation {res['reservation_id']} to flights that "
                        f"never reach its destination {dest}: the policy forbids changing it",
                    )
        if step.name == "cancel_reservation" and v.policy_time is not None:
            created = _when(res.get("created_at"))
            airline_cancelled = any(
                isinstance(f, dict) and f.get("status") == "cancelled" for f in res.get("flights") or ()
            )
            if (
                created is not None
                and res.get("cabin") != "business"
                and res.get("insurance") == "no"
                and v.policy_time - created > timedelta(hours=24)
                and not airline_cancelled
            ):
                return _against_policy(
                    f"the reference cancels reservation {res['reservation_id']} ({res.get('cabin')}, "
                    f"no insurance, made {res.get('created_at')}): the policy forbids it",
                )
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1000 else None


def _bags_against_policy(v: _View, args: dict[str, Any], res: dict[str, Any] | None, cabin: str) -> Finding | None:
    """A reference's booking (``res`` None) or bag update of reservation ``res`` that charges checked bags
    the policy gives free: ``nonfree_baggages`` above what the total leaves past the free allowance (and,
    for an update, above the bags already paid for). ``cabin``: the reservation's cabin as the reference
    set it before this step ("" when it did not)."""
    total, nonfree = _count(args.get("total_baggages")), _count(args.get("nonfree_baggages"))
    if total is None or nonfree is None or nonfree == 0:
        return None
    user: Any
    seat: Any
    passengers: Any
    if res is None:
        user, seat, passengers, paid, what = (
            args.get("user_id"),
            args.get("cabin"),
            args.get("passengers"),
            0,
            "booking",
        )
    else:
        user, passengers, what = res.get("user_id"), res.get("passengers"), f"reservation {res.get('reservation_id')}"
        seat = cabin or res.get("cabin")
        paid = _count(res.get("nonfree_baggages")) or 0
    if not isinstance(user, str) or not isinstance(seat, str) or not isinstance(passengers, list) or not passengers:
        return None
    tier = _membership(v, user)
    per = v.bags.get(tier or "", {}).get(seat)
    if per is None:
        return None
    free = per * len(passengers)
    if nonfree <= max(0, total - free, paid):
        return None
    return _against_policy(
        f"the reference's {what} charges {nonfree} of {total} checked bags, where the policy gives a {tier} "
        f"member {per} free per {seat} passenger ({len(passengers)} passenger(s)): the charge breaks the policy",
    )


def _membership(v: _View, user: str) -> str | None:
    """The membership of ``user`` as a profile the agent read shows it (a call naming the user, whose output
    holds ``"membership"``)."""
    for c in v.traj.calls:
        obs = c.observation
        if (
            not obs
            or '"membership"' not in obs
            or not isinstance(c.arguments, dict)
            or c.arguments.get("user_id") != user
        ):
            continue
        for obj in _json_objects(obs):
            tier = obj.get("membership")
            if isinstance(tier, str):
                return tier.lower()
    return None


def _when(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value[:19])
    except ValueError:
        return None


def reference_unstated_choice(v: _View) -> Finding | None:
    """A write the reference expects needs a wording (a reason, a phrase) that
    the user's instructions never give; the agent used the user's own."""
    case = v.case
    if case is None or not case.expected_calls or not v.instructions:
        return None
    low = v.instructions.lower()
    said = v.said()
    for j in v.missing_writes:
        step = case.expected_calls[j]
        args = step.arguments if isinstance(step.arguments, dict) else {}
        for key, want in args.items():
            if (
                not (isinstance(want, str) and " " in want.strip() and len(want) <= 40 and _WORDING.fullmatch(want))
                or want.lower() in low
            ):
                continue
            for c in v.traj.calls:
                got = c.arguments.get(key) if c.name == step.name and isinstance(c.arguments, dict) else None
                if isinstance(got, str) and got.lower() != want.lower() and got.lower() in said:
                    return Finding(
                        "reference_unstated_choice",
                        TASK,
                        0.65,
                        None,
                        "",
                        f"the reference's {step.name} needs {key}={want!r}, which the user's "
                        f"instructions never give; the user said {got!r}",
                    )
    return None


def reward_without_fault(v: _View) -> Finding | None:
    """Every expected step done, no write the reference does not hold, no
    failure found, and still reward 0: the grader checks what the reference
    does not show. Never for a run cut before the judge's verdict (``stopped``:
    a step limit, an error limit)."""
    if v.traj.stopped in CUT_STOPS:
        return None  # the run was cut (a step limit) before the judge scored it: its reward 0 is the cut
    if v.steps_done and v.wrong_write is None and not v.failures and v.traj.reward is not None:
        return Finding(
            "reward_without_fault",
            TASK,
            0.6,
            None,
            "",
            "every expected step is done and nothing else is wrong, yet the reward is 0",
        )
    return None


# -- the verdict -----------------------------------------------------------------


def blame_of(traj: Trajectory, case: Case | None, score: Any) -> Blame | None:
    """The blame of one failed conversation (None when it passed or is no
    conversation). ``score`` is its TrajectoryScore."""
    if getattr(score, "passed", True) or not any(m.role == "user" for m in traj.messages or ()):
        return None
    v = _view(traj, case, score)
    notes = [n for n in (too_cooperative(v),) if n is not None]
    own_user = getattr(score, "user_error", None)
    findings: list[Finding] = []
    if own_user:
        findings.append(_own_user_error(v, own_user[0]))
    for detector in (reference_against_policy, reference_unstated_choice, reward_without_fault):
        found = detector(v)
        if found is not None:
            findings.append(found)
    user_missing, agent_missing = user_action_missing(v)
    cut = _user_cut(v)
    # at one message, the plainer act first: a stop, a request for a human, a withheld id, a fact last
    user_found = [
        f
        for f in (
            early_stop(v),
            asks_human(v),
            withholds(v),
            changes_mind(v),
            user_missing,
            unfounded_fact(v),
            unfounded_trip_type(v),
            outside_scenario(v),
            cut,
        )
        if f is not None
    ]
    findings.extend(sorted(user_found, key=lambda f: f.at if f.at is not None else 10**9))
    agent = _agent_finding(v, agent_missing)
    if agent_missing is not None and agent is not agent_missing:  # outranked by the agent's wrong write or cut,
        findings.append(agent_missing)  # but listed: the user's device action the agent never asked for
    findings.append(agent)  # the agent's finding last (``_choose`` falls back to it)
    chosen = _choose(v, findings)
    ordered = [chosen, *[f for f in findings if f is not chosen]]
    evidence = chosen.detail + (f': "{chosen.quote}"' if chosen.quote else "")
    return Blame(chosen.who, chosen.confidence, chosen.detector, evidence, chosen.at, chosen.quote, ordered, notes)


_MESSAGE_NAMED = re.compile(r"message (\d+) ")


def _own_user_error(v: _View, error: dict[str, Any]) -> Finding:
    """ToolLens's own simulated user's recorded fault (app/core/run/conversation.py's check_user,
    whose detail names the message, "message 3 says …"): that user message quoted, at its index."""
    detail, why = str(error.get("detail", "")), f"the simulated user's own fault: {error.get('kind')}"
    named = _MESSAGE_NAMED.match(detail)
    at = int(named.group(1)) - 1 if named else -1
    if 0 <= at < len(v.messages) and v.messages[at][1] == "user":
        return Finding("simulator_error", USER, 0.9, at, _quote(v.messages[at][2]), f"{why} ({detail})")
    return Finding("simulator_error", USER, 0.9, None, _quote(detail), why)


def _user_cut(v: _View) -> Finding | None:
    """A run the simulated user's own error cut short (τ²'s ``user_error``), at its last message."""
    if v.traj.stopped != "user_error" or not v.messages:
        return None
    return Finding("stopped", USER, 0.6, v.messages[-1][0], "", "the run was cut by the simulated user's error")


def _agent_finding(v: _View, agent_missing: Finding | None) -> Finding:
    if v.wrong_write is not None:
        call, why = v.wrong_write
        at = v.message_before_call(call)
        c = v.traj.calls[call]
        quote = _quote(f"{c.name}({_ARGS_JSON.encode(c.arguments)})")
        return Finding("agent_wrong_write", AGENT, 0.6, at, quote, why)
    stop = v.traj.stopped
    if stop in CUT_STOPS and stop != "user_error":
        at = v.messages[-1][0] if v.messages else None
        missing = (
            f"; the expected {v.case.expected_calls[v.missing_writes[0]].name} was never made"
            if v.missing_writes and v.case is not None and v.case.expected_calls
            else ""
        )
        return Finding("stopped", AGENT, 0.6, at, "", f"the run was cut ({stop}) before any verdict{missing}")
    if agent_missing is not None:
        return agent_missing
    if v.missing_writes and v.case is not None and v.case.expected_calls:
        name = v.case.expected_calls[v.missing_writes[0]].name
        return Finding("agent_missing_write", AGENT, 0.5, None, "", f"the agent never makes the expected {name}")
    return Finding("agent_default", AGENT, 0.4, None, "", "no user or task finding: the failure stays the agent's")


def _choose(v: _View, findings: list[Finding]) -> Finding:
    for f in findings:
        if f.who == TASK or f.detector == "simulator_error":
            return f
    agent = findings[-1]
    cut = v.wrong_write[0] if v.wrong_write is not None else None
    for f in findings:
        if f.who != USER:
            continue
        if cut is None or f.at is None or v.calls_before_message(f.at) <= cut:
            return f
    return agent


def blame_fields(b: Blame | None) -> dict[str, Any]:
    """The keys a failed case gains in ``score --json`` (docs/formats.md)."""
    if b is None:
        return {}
    return {
        "blame": b.blame,
        "blame_evidence": b.evidence,
        "blame_confidence": b.confidence,
        "blame_detector": b.detector,
    }


DEFAULT_SIMULATOR_SHARE = 0.10  # gate and compare: above this share of flipped failures, no verdict


def simulator_note(blamed_on_user: int, flipped: int, share: float = DEFAULT_SIMULATOR_SHARE) -> str | None:
    """What gate and compare say instead of better or worse when more than
    ``share`` of the failures a change turns on (or off) are the simulated
    user's; None when the comparison can be trusted on this count."""
    if flipped == 0 or blamed_on_user / flipped <= share + 1e-12:
        return None
    return (
        f"{blamed_on_user} of the {flipped} failures this change turns on or off "
        f"({100 * blamed_on_user / flipped:.0f}%) are blamed on the simulated user, above the "
        f"{100 * share:g}% allowed: the simulator, not the change, may explain the difference; "
        "no verdict of better or worse"
    )
