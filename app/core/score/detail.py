"""A scored trajectory's detail as typed records: what scoring finds beyond its
calls (``TrajectoryScore.detail``), what the store keeps as the ``detail`` JSON
(docs/formats.md) and what the pages, the API and the export read back.

The stored JSON is a contract: a record writes back exactly the JSON it was read
from (its keys, in their order, and each value), so rows stored by any version
read and write unchanged. A record keeps the keys it was given (``keys``); a key
it does not know, or a value of another shape (an object or a list where the
other is expected), is kept as stored (``extra``) and its field stays at its
default. Plain values are kept as stored; lists are tuples here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:  # scoring calls this module: imported for types only
    from app.core.records import Trajectory
    from app.core.score.divergence import Divergence

Json = Any  # a JSON value kept as given: an agent's state, a value it stated
P = TypeVar("P", bound="Part")
PLAIN, ONE, MANY, TUPLE = range(4)  # how a field is read: as stored, a part, a list of parts, a tuple
_SHAPES: dict[type, dict[str, int]] = {}  # each part's fields, and how each is read
_DEFAULTS: dict[type, dict[str, Any]] = {}  # each part's fields' defaults
_FLAT: set[type] = set()  # the parts whose fields are all plain values


def _plain(v: Any) -> Json:
    """A tuple field's value as JSON (tuples back to lists, at any depth)."""
    return [_plain(x) for x in v] if isinstance(v, tuple) else v


def _tuple(v: Json) -> Any:
    if not isinstance(v, list):
        raise TypeError(v)
    return tuple(tuple(x) if isinstance(x, list) else x for x in v)


@dataclass(frozen=True)
class Part:
    """A JSON object read into fields. Subclasses name which keys hold a part
    (``PARTS``), a list of parts (``LISTS``) or a list kept as a tuple (``TUPLES``);
    any other value is kept as given."""

    keys: tuple[str, ...] = field(default=(), repr=False)  # the object's keys, in the order it writes them
    extra: Mapping[str, Json] = field(default_factory=dict, repr=False)  # what is kept as stored

    PARTS: ClassVar[Mapping[str, type[Part]]] = {}
    LISTS: ClassVar[Mapping[str, type[Part]]] = {}
    TUPLES: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def of(cls: type[P], **values: Any) -> P:
        """A record of these values, written in the order given."""
        return cls._new(tuple(values), {}, values)

    @classmethod
    def from_dict(cls: type[P], data: Mapping[str, Json], only: Collection[str] | None = None) -> P:
        """The record of a stored object (of any version); ``only``: the keys read, the others kept as
        stored (a page that lists many reads what it shows)."""
        shape = cls._shape()
        values: dict[str, Any] = {}
        extra: dict[str, Json] = {}
        for k, v in data.items():
            how = shape.get(k)
            if how is None or (only is not None and k not in only):
                extra[k] = v
            elif v is None or how == PLAIN:
                values[k] = v  # a plain value: as stored
            else:
                try:
                    values[k] = cls._load(k, v)
                except (TypeError, ValueError, AttributeError):  # another shape: kept as stored
                    extra[k] = v
        return cls._new(tuple(data), extra, values)

    @classmethod
    def _new(cls: type[P], keys: tuple[str, ...], extra: dict[str, Json], values: Mapping[str, Any]) -> P:
        """A record built without ``__init__``'s cost per field: every stored trajectory's parts are built here."""
        part = object.__new__(cls)
        state = part.__dict__
        state.update(_DEFAULTS[cls] if cls in _DEFAULTS else cls._defaults())
        state.update(values)
        state["keys"], state["extra"] = keys, extra
        return part

    @classmethod
    def _load(cls, k: str, v: Json) -> Any:
        """A JSON value read into its field (exactly what ``_dump`` writes back)."""
        if k in cls.PARTS:
            return cls.PARTS[k].from_dict(v)
        if k in cls.LISTS:
            if not isinstance(v, list):
                raise TypeError(v)
            return tuple(cls.LISTS[k].from_dict(x) for x in v)
        return _tuple(v)

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        _DEFAULTS[cls] = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
        return _DEFAULTS[cls]

    @classmethod
    def _shape(cls) -> dict[str, int]:
        shape = _SHAPES.get(cls)
        if shape is None:
            shape = _SHAPES[cls] = {
                f.name: ONE
                if f.name in cls.PARTS
                else MANY
                if f.name in cls.LISTS
                else TUPLE
                if f.name in cls.TUPLES
                else PLAIN
                for f in fields(cls)
                if f.name not in ("keys", "extra")
            }
            if all(how == PLAIN for how in shape.values()):
                _FLAT.add(cls)
        return shape

    @classmethod
    def _dump(cls, k: str, v: Any) -> Json:
        how = cls._shape()[k]
        if v is None or how == PLAIN:
            return v
        if how == ONE:
            return v.to_dict()
        return [x.to_dict() for x in v] if how == MANY else _plain(v)

    def json(self, key: str) -> Json:
        """One key's value as stored (None: not stored)."""
        if key in self.extra:
            return self.extra[key]
        return self._dump(key, getattr(self, key)) if key in self.keys else None

    def has(self, key: str) -> bool:
        """The key is stored, with a value this version reads."""
        return key in self.keys and key not in self.extra

    def to_dict(self) -> dict[str, Json]:
        if self.extra:
            return {k: self.json(k) for k in self.keys}
        shape = self._shape()
        state = self.__dict__
        if type(self) in _FLAT:  # plain values only: as they are
            return {k: state[k] for k in self.keys}
        out: dict[str, Json] = {}
        for k in self.keys:  # written out: every stored trajectory comes through here
            v = state[k]
            how = shape[k]
            out[k] = (
                v
                if v is None or how == PLAIN
                else v.to_dict()
                if how == ONE
                else [x.to_dict() for x in v]
                if how == MANY
                else _plain(v)
            )
        return out


@dataclass(frozen=True)
class Fault(Part):
    """The fault found: its call, its kind, what made it fail and, in a conversation, its turn."""

    step: int | None = None
    kind: str = ""
    source: str | None = None  # one of scoring.ERROR_SOURCES
    turn: int | None = None


@dataclass(frozen=True)
class FaultNotReached(Part):
    """A planned fault the agent never reached."""

    step: int | None = None
    kind: str = ""


@dataclass(frozen=True)
class Claim(Part):
    """A sentence claiming the result of a call that never succeeded."""

    call: int | None = None  # counted from 0
    tool: str = ""
    sentence: str = ""
    message: int | None = None  # counted from 1


@dataclass(frozen=True)
class Reported(Part):
    """A message telling the user the failed step did not work."""

    message: int | None = None  # counted from 1
    sentence: str = ""


@dataclass(frozen=True)
class Evidence(Part):
    """What the outcome was decided on (docs/outcomes.md)."""

    ungrounded_values: tuple[str, ...] = ()
    give_up_phrase: str | None = None
    grounded_values: Mapping[str, str] | None = None  # value -> how it is grounded
    said_after_fault: bool | None = None
    looked_in: tuple[str, ...] = ()
    failed_call: int | None = None  # counted from 0
    sentence: str | None = None
    message: int | None = None  # the message stating the ungrounded values, counted from 1
    reported: Reported | None = None
    claimed: Claim | None = None
    handoff: str | None = None
    stopped: str | None = None
    ended_on_error: bool | None = None
    reward: float | None = None
    case_passed: bool | None = None
    datum_in_answer: str | None = None
    datum_observed: str | None = None  # "after_fault", "before_fault" or None

    PARTS: ClassVar[Mapping[str, type[Part]]] = {"reported": Reported, "claimed": Claim}
    TUPLES: ClassVar[frozenset[str]] = frozenset({"ungrounded_values", "looked_in"})


@dataclass(frozen=True)
class StateMismatch(Part):
    """A key of the final state that is not the expected one ("": the whole state)."""

    key: str = ""
    expected: Json = None
    got: Json = None
    note: str | None = None


@dataclass(frozen=True)
class Turn(Part):
    """One user turn of a conversation: what the user said, its figures and failures."""

    turn: int | None = None
    user: str = ""
    figures: Mapping[str, Json] | None = None  # family -> {num, den}
    failures: tuple[str, ...] = ()

    TUPLES: ClassVar[frozenset[str]] = frozenset({"failures"})


@dataclass(frozen=True)
class Note(Part):
    """A simulated user's fault (``user_error``) or act on purpose (``user_acts``)."""

    kind: str = ""
    detail: str = ""


@dataclass(frozen=True)
class AgentError(Part):
    """What the agent raised: its type, its message, the last frames of its traceback."""

    type: str = ""
    message: str = ""
    traceback: tuple[str, ...] = ()

    TUPLES: ClassVar[frozenset[str]] = frozenset({"traceback"})


@dataclass(frozen=True)
class FirstDivergence(Part):
    """The first divergence (app/core/score/divergence.py) with its cause's key and words."""

    kind: str = ""
    tool: str = ""
    other: str = ""
    call: int | None = None
    step: int | None = None
    key: str = ""
    text: str = ""

    @classmethod
    def of_divergence(cls, d: Divergence) -> FirstDivergence:
        return cls.of(kind=d.kind, tool=d.tool, other=d.other, call=d.call, step=d.step, key=d.key, text=d.text)


@dataclass(frozen=True)
class Finding(Part):
    """One blame detector's finding (app/core/score/blame.py)."""

    detector: str = ""
    who: str = ""
    confidence: float | None = None
    at: int | None = None  # index in the messages
    quote: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Blame(Part):
    """A failed conversation's blame and what else was found (app/core/score/blame.py)."""

    blame: str = ""  # "agent", "user" or "task"
    confidence: float | None = None
    detector: str = ""
    evidence: str = ""
    at: int | None = None
    quote: str = ""
    findings: tuple[Finding, ...] = ()  # the blamed one first
    notes: tuple[Finding, ...] = ()  # recorded, never a blame

    LISTS: ClassVar[Mapping[str, type[Part]]] = {"findings": Finding, "notes": Finding}


@dataclass(frozen=True)
class Message(Part):
    """A message of a conversation, as the record held it."""

    role: str = ""
    content: str = ""
    calls_before: int | None = None


@dataclass(frozen=True)
class TrajectoryDetail(Part):
    """Everything scoring found but the calls and the identity, with the inputs the
    store keeps beside it (``stopped``, ``messages``, ``batches``)."""

    has_reference: bool = False
    fault: Fault | None = None
    missing_steps: tuple[int, ...] = ()
    excused_steps: tuple[int, ...] = ()
    undone_steps: tuple[int, ...] = ()  # attempted on the right tool, no call of it succeeded
    dependency_violations: tuple[tuple[str, str], ...] = ()
    outcome: str | None = None
    outcome_evidence: Evidence | None = None
    final_state: Json = None
    state_mismatches: tuple[StateMismatch, ...] = ()
    reward: float | None = None
    figures: Mapping[str, Json] | None = None  # family -> {num, den}
    fault_not_reached: FaultNotReached | None = None
    turns: tuple[Turn, ...] = ()  # a conversation's
    step_turns: tuple[int, ...] | None = None  # each expected step's user turn, in a conversation
    user_error: tuple[Note, ...] = ()  # the simulated user's faults: never the agent's
    agent_error: AgentError | None = None
    divergence: FirstDivergence | None = None  # a failed trajectory's
    blame: Blame | None = None  # a failed conversation's
    user_profile: str | None = None
    user_acts: tuple[Note, ...] = ()  # what that profile did on purpose
    user_mirror_trial: int | None = None  # under a profile: the cooperative trial it mirrors
    stopped: str | None = None  # the record's: why the agent stopped
    messages: tuple[Message, ...] = ()  # the record's conversation
    batches: tuple[Json, ...] = ()  # each call's batch, where any call has one

    PARTS: ClassVar[Mapping[str, type[Part]]] = {
        "fault": Fault,
        "outcome_evidence": Evidence,
        "fault_not_reached": FaultNotReached,
        "agent_error": AgentError,
        "divergence": FirstDivergence,
        "blame": Blame,
    }
    LISTS: ClassVar[Mapping[str, type[Part]]] = {
        "state_mismatches": StateMismatch,
        "turns": Turn,
        "user_error": Note,
        "user_acts": Note,
        "messages": Message,
    }
    TUPLES: ClassVar[frozenset[str]] = frozenset(
        {"missing_steps", "excused_steps", "undone_steps", "dependency_violations", "step_turns", "batches"}
    )

    def _with(self, **values: Any) -> TrajectoryDetail:
        """Keys set (a new one written last, as a merge into the stored object would)."""
        keys = self.keys + tuple(k for k in values if k not in self.keys)
        extra = {k: v for k, v in self.extra.items() if k not in values}
        return self._new(keys, extra, {**self.__dict__, **values})

    def with_inputs(self, traj: Trajectory) -> TrajectoryDetail:
        """With what the store keeps of the record itself: why it stopped, its messages, its batches."""
        values: dict[str, Any] = {}
        if traj.stopped is not None:
            values["stopped"] = traj.stopped
        if traj.messages is not None:
            values["messages"] = tuple(
                Message.of(role=m.role, content=m.content, calls_before=m.calls_before) for m in traj.messages
            )
        if any(c.batch is not None for c in traj.calls):
            values["batches"] = tuple(c.batch for c in traj.calls)
        return self._with(**values)

    def with_divergence(self, d: Divergence) -> TrajectoryDetail:
        """With a first divergence found later (``toollens db backfill``)."""
        return self._with(divergence=FirstDivergence.of_divergence(d))


def stored_detail(data: Json, only: Collection[str] | None = None) -> TrajectoryDetail:
    """A stored ``detail`` (of any version; not an object: an empty one), its ``only`` keys read."""
    return TrajectoryDetail.from_dict(data if isinstance(data, dict) else {}, only)
