"""``inspect``: Inspect AI logs, ``.eval`` (a zip archive: ``header.json``
and one ``samples/<id>_epoch_<n>.json`` per sample and epoch; Zstandard- or
deflate-compressed) or ``.json`` (one document with ``samples``).

One trajectory per sample and epoch (trial = epoch - 1). The calls are the
assistant messages' ``tool_calls`` (``id``, ``function``, ``arguments``),
their results the ``role: tool`` messages (``tool_call_id``, ``content``);
a result with an ``error`` (``{type, message}``) is a tool error, and only
then: a shell command that failed, whose text sits in the result without
``error``, is an observation like any other. The question is the first user
message (later user messages are the scaffold's: a "continue" prompt, a
token count), the answer ``output.completion``, else the text of
``output.choices[0].message.content``. The reward is the first score whose
value is a number, or C/I (1/0). Tokens and the model come from the model
events (those of the scorers left out where spans tell them apart), the
toolset from the tools the model events offered.

The archive is read here, logs from before span events, message ids and
pooled model inputs alike; a log of a version newer than ToolLens knows is
read by the public ``inspect_ai`` package's reader when it is installed (an
optional extra). Either way the archive's sizes are checked first
(app/importers/evalzip).
"""

from __future__ import annotations

import importlib.util
import logging
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory, SuiteError, ToolSpecError
from app.core.records import MAX_DEPTH, MAX_NAME
from app.core.suites.tools import ToolSpec
from app.core.usage import MAX_MS, MAX_TOKENS
from app.importers.base import Conversion, Converted, Options, call_error, mark_batch, record_or_reason
from app.importers.bounds import AttachmentBudget, ImportBounds, Overspent, ValueCount, import_bounds
from app.importers.evalzip import check_sizes, open_archive, read_member
from app.importers.jsonstream import decode_document, iter_object, value_at
from app.importers.toolsets import resolve_toolset, toolset_document

NAME = "inspect"
ATTACHMENT = "attachment://"
SAMPLES = "samples/"
SCORING_SPANS = ("scorers", "scorer")
KNOWN_VERSION = 2  # the newest log format read here (Inspect writes version 2 since 2024)
CORRECT = {"C": 1.0, "I": 0.0}

Sample = tuple[int, Mapping[str, Any] | InvalidTrajectory]
"""(1-based position of the sample in the log, the sample or why it cannot be read)."""


def inspect_ai_installed() -> bool:
    return importlib.util.find_spec("inspect_ai") is not None


# ---- reading the log -------------------------------------------------------------------------------------------


def read_log(
    path: Path, *, use_inspect_ai: bool | None = None, bounds: ImportBounds | None = None
) -> tuple[Mapping[str, Any], Iterator[Sample]]:
    """The log's header (``eval``, ``plan``, ``results``…) and its samples.
    ``use_inspect_ai``: None = the package's reader for a log newer than
    ``KNOWN_VERSION`` when the package is installed, ToolLens's own otherwise
    (the package's reader runs an event loop per sample: about 30 ms a
    sample, some 30 times the direct conversion; bench/README.md)."""
    header, samples = open_log(path, use_inspect_ai=use_inspect_ai, bounds=bounds)
    return header, samples()


def open_log(
    path: Path, *, use_inspect_ai: bool | None = None, bounds: ImportBounds | None = None
) -> tuple[Mapping[str, Any], Callable[[], Iterator[Sample]]]:
    """``read_log``, with its samples as a function: each call a fresh pass
    (a ``.json`` log is indexed once, then each pass reads its samples one by
    one: memory does not grow with the file)."""
    source = str(path)
    limits = bounds or import_bounds()
    if not path.is_file():
        raise InvalidTrajectory("file not found", source=source)
    zipped = path.suffix == ".eval" or _is_zip(path)
    index: list[tuple[tuple[int, int], int, int]] = []
    if zipped:
        with open_archive(path) as archive:
            check_sizes(archive, source, limits.member_bytes)
        header = _archive_header(path, limits)
    else:
        header, index = _json_log(path, limits)
    if use_inspect_ai is None:
        use_inspect_ai = newer_than_known(header) and inspect_ai_installed()
    if use_inspect_ai:
        return header, lambda: _with_inspect_ai(path)[1]
    if zipped:
        return header, lambda: _archive_samples(path, _ranks(header), limits)
    rank = _ranks(header)
    ordered = sorted(index, key=lambda e: (rank(*e[0]) if e[0][0] is not None else (len(index), 0), e[1]))
    return header, lambda: _json_samples(path, [offset for _, _, offset in ordered], limits)


def _json_log(path: Path, limits: ImportBounds) -> tuple[dict[str, Any], list[tuple[tuple[Any, Any], int, int]]]:
    """A ``.json`` log read once as a stream: its members but ``samples``, and
    for each sample its (id, epoch), its place in the file and its byte offset."""
    header: dict[str, Any] = {}
    index: list[tuple[tuple[Any, Any], int, int]] = []
    try:
        for key, value, offset in iter_object(
            path, "samples", max_chars=limits.member_bytes, max_values=limits.json_values
        ):
            if offset < 0:
                header[key] = value
            elif isinstance(value, Mapping):
                index.append(((value.get("id"), value.get("epoch")), len(index), offset))
            else:
                index.append(((None, None), len(index), offset))
    except InvalidTrajectory as exc:
        if not header.get("eval") and not index:
            raise SuiteError(
                f"not an Inspect log: expected a .eval archive or a .json log with 'eval' and 'samples' ({exc.detail})",
                path=str(path),
            ) from None
        raise
    if not isinstance(header.get("eval"), Mapping):
        raise SuiteError(
            "not an Inspect log: expected a .eval archive or a .json log with 'eval' and 'samples'", path=str(path)
        )
    return header, index


def _json_samples(path: Path, offsets: list[int], limits: ImportBounds) -> Iterator[Sample]:
    source = str(path)
    for at, offset in enumerate(offsets, start=1):
        try:
            sample = value_at(
                path, offset, max_chars=limits.member_bytes, max_values=limits.json_values, what="a sample"
            )
        except InvalidTrajectory as exc:
            yield at, InvalidTrajectory(exc.detail, index=at, source=source)
            continue
        yield (
            at,
            sample
            if isinstance(sample, Mapping)
            else InvalidTrajectory("a sample is an object", index=at, source=source),
        )


def newer_than_known(header: Mapping[str, Any]) -> bool:
    version = header.get("version")
    return type(version) is int and version > KNOWN_VERSION


def _ranks(header: Mapping[str, Any]) -> Any:
    """The order Inspect lists samples in: the dataset's ``sample_ids``, then the epoch."""
    spec = header.get("eval")
    dataset = spec.get("dataset") if isinstance(spec, Mapping) else None
    ids = dataset.get("sample_ids") if isinstance(dataset, Mapping) else None
    order = {str(sid): i for i, sid in enumerate(ids)} if isinstance(ids, list) else {}

    def rank(sid: Any, epoch: Any) -> tuple[int, int]:
        return order.get(str(sid), len(order)), epoch if type(epoch) is int else 0

    return rank


def _is_zip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"PK\x03\x04"


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, source: str, limits: ImportBounds) -> Any:
    """A member decoded, within the bounds on its bytes and on the values it builds."""
    where = f"{source}: {info.filename[:200]}"
    raw = read_member(archive, info, source, limits.member_bytes, ValueCount(limits.json_values, where))
    return decode_document(raw, where)


def _archive_header(path: Path, limits: ImportBounds) -> Mapping[str, Any]:
    source = str(path)
    with open_archive(path) as archive:
        names = set(archive.namelist())
        for name in ("header.json", "_journal/start.json"):  # a finished log, or one still running
            if name in names:
                header = _member(archive, archive.getinfo(name), source, limits)
                if isinstance(header, Mapping) and isinstance(header.get("eval"), Mapping):
                    return header
    raise SuiteError(
        "not an Inspect log: the archive has no header.json (nor _journal/start.json) with 'eval'", path=source
    )


def _archive_samples(path: Path, rank: Any, limits: ImportBounds) -> Iterator[Sample]:
    source = str(path)

    def key(info: zipfile.ZipInfo) -> tuple[tuple[int, int], str]:
        sid, _, epoch = info.filename[len(SAMPLES) : -len(".json")].rpartition("_epoch_")
        return rank(sid, int(epoch) if epoch.isdigit() and len(epoch) < 10 else 0), info.filename

    with open_archive(path) as archive:
        members = sorted(
            (i for i in archive.infolist() if i.filename.startswith(SAMPLES) and i.filename.endswith(".json")), key=key
        )
        seen: set[str] = set()
        at = 0
        for info in reversed(members):  # a member written twice: the last one wins, as for every zip reader
            if info.filename in seen:
                members.remove(info)
            seen.add(info.filename)
        for info in members:
            at += 1
            try:
                sample = _member(archive, info, source, limits)
            except InvalidTrajectory as exc:
                yield at, InvalidTrajectory(exc.detail, index=at, field=info.filename, source=source)
                continue
            yield (
                at,
                sample
                if isinstance(sample, Mapping)
                else InvalidTrajectory("a sample is an object", index=at, field=info.filename, source=source),
            )


@contextmanager
def _quiet() -> Iterator[None]:
    """The package's warnings about the machine it reads on (a sandbox plugin
    not installed here) say nothing about the log: kept out of the notes."""
    logger = logging.getLogger("inspect_ai")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _with_inspect_ai(path: Path) -> tuple[Mapping[str, Any], Iterator[Sample]]:
    """The log read by the ``inspect_ai`` package (attachments resolved)."""
    from inspect_ai.log import read_eval_log, read_eval_log_samples

    source = str(path)
    try:
        with _quiet():
            header = read_eval_log(str(path), header_only=True).model_dump(mode="json", exclude_none=True)
    except Exception as exc:  # the package's own errors: a broken or foreign file
        raise InvalidTrajectory(
            f"inspect_ai cannot read this log ({type(exc).__name__}: {str(exc)[:300]})", source=source
        ) from None

    def samples() -> Iterator[Sample]:
        try:
            with _quiet():  # one sample at a time
                for at, sample in enumerate(
                    read_eval_log_samples(str(path), all_samples_required=False, resolve_attachments=False), start=1
                ):
                    yield at, sample.model_dump(mode="json", exclude_none=True)
        except Exception as exc:
            yield (
                0,
                InvalidTrajectory(
                    f"inspect_ai cannot read the samples ({type(exc).__name__}: {str(exc)[:300]})", source=source
                ),
            )

    return header, samples()


# ---- a sample as a trajectory record ---------------------------------------------------------------------------


class _Text:
    """Message content as text, ``attachment://`` references resolved."""

    def __init__(self, attachments: Any, budget: AttachmentBudget | None = None):
        self.attachments = attachments if isinstance(attachments, Mapping) else {}
        self.budget = budget  # each resolved reference is counted against it (app.importers.bounds)

    def __call__(self, content: Any) -> str:
        if isinstance(content, str):
            return self.resolve(content)
        if isinstance(content, list):  # parts: text is said; reasoning, images, tool uses are not
            return "\n".join(
                self.resolve(p["text"])
                for p in content
                if isinstance(p, Mapping) and p.get("type", "text") == "text" and isinstance(p.get("text"), str)
            )
        return ""

    def value(self, value: Any, depth: int = 0) -> Any:
        """References resolved inside a JSON value (tool arguments, a tool's
        schema), down to the depth a stored value may have."""
        if isinstance(value, str):
            return self.resolve(value)
        if depth >= MAX_DEPTH:
            return value
        if isinstance(value, Mapping):
            return {k: self.value(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, depth + 1) for v in value]
        return value

    def resolve(self, text: str) -> str:
        if text.startswith(ATTACHMENT):
            name = text[len(ATTACHMENT) :]
            found = self.attachments.get(name)
            if not isinstance(found, str):
                return text
            if self.budget is not None:
                self.budget.spend(len(found), name)
            return found
        return text


def _count(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value < MAX_TOKENS else None


def model_call(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """A model event's usage. Inspect's ``input_tokens`` leaves cache reads
    and writes out for some providers (Anthropic) and in for others
    (OpenAI); ``total_tokens`` minus the output is the whole prompt either way."""
    output = event.get("output")
    if not isinstance(output, Mapping):
        return None
    found = output.get("usage")
    usage: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    n_in, n_out, total = (_count(usage.get(k)) for k in ("input_tokens", "output_tokens", "total_tokens"))
    read = _count(usage.get("input_tokens_cache_read"))
    whole = n_in
    if total is not None and n_out is not None and total - n_out >= (n_in or 0):
        whole = total - n_out
    served = output.get("model") or event.get("model")
    seconds = output.get("time")
    ms = float(seconds) * 1000 if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else -1.0
    latency = round(ms, 3) if 0 <= ms < MAX_MS else None
    entry = {
        "model": served[:256] if isinstance(served, str) and served else None,
        "input_tokens": whole,
        "output_tokens": n_out,
        "cached_tokens": read,
        "latency_ms": latency,
    }
    return {k: v for k, v in entry.items() if v is not None}


def _scoring_spans(events: list[Any]) -> set[str]:
    """The ids of the spans that run scorers (and the spans inside them)."""
    parent: dict[str, str | None] = {}
    kind: dict[str, str] = {}
    for e in events:
        if isinstance(e, Mapping) and e.get("event") == "span_begin" and isinstance(e.get("id"), str):
            parent[e["id"]] = e.get("parent_id") if isinstance(e.get("parent_id"), str) else None
            kind[e["id"]] = str(e.get("type") or "")
    scoring: set[str] = set()
    for span in parent:
        at: str | None = span
        for _ in range(len(parent) + 1):  # a parent chain, walked without recursion (and without a loop)
            if at is None:
                break
            if kind.get(at) in SCORING_SPANS:
                scoring.add(span)
                break
            at = parent.get(at)
    return scoring


def model_calls(events: Any) -> list[dict[str, Any]]:
    if not isinstance(events, list):
        return []
    scoring = _scoring_spans(events)
    out = []
    for e in events:
        if isinstance(e, Mapping) and e.get("event") == "model" and e.get("span_id") not in scoring:
            entry = model_call(e)
            if entry:
                out.append(entry)
    return out


def reward(sample: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """The first score whose value is a number or C/I, and its scorer's name."""
    scores = sample.get("scores")
    if not isinstance(scores, Mapping):
        scores = {"score": sample.get("score")}  # logs of version 1: one score
    for name, score in scores.items():
        value = score.get("value") if isinstance(score, Mapping) else None
        if isinstance(value, bool):
            return (1.0 if value else 0.0), str(name)
        if isinstance(value, (int, float)) and value == value and abs(value) < 1e300:
            return float(value), str(name)
        if isinstance(value, str) and value in CORRECT:
            return CORRECT[value], str(name)
    return None, None


def _stopped(sample: Mapping[str, Any]) -> str | None:
    limit = sample.get("limit")
    if isinstance(limit, Mapping) and isinstance(limit.get("type"), str):
        return f"{limit['type'][:30]}_limit"
    return "agent_error" if sample.get("error") else None


def sample_id(sample: Mapping[str, Any]) -> str:
    sid = sample.get("id")
    if not isinstance(sid, (str, int)) or isinstance(sid, bool) or str(sid) == "":
        raise ValueError("required, a string or an integer")
    return str(sid)[:MAX_NAME]


def sample_to_record(sample: Mapping[str, Any], budget: AttachmentBudget | None = None) -> dict[str, Any]:
    """The trajectory-record fields of one sample and epoch (the characters
    its references expand to counted against ``budget``: Overspent past it)."""
    text = _Text(sample.get("attachments"), budget)
    calls: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    said: list[dict[str, Any]] = []
    question = ""
    last = ""
    messages = sample.get("messages")
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role == "user" and not question:
            question = text(m.get("content"))
            if question.strip():
                said.append({"role": "user", "content": question, "calls_before": 0})
        elif role == "assistant":
            content = text(m.get("content"))
            if content.strip():
                last = content
                said.append({"role": "assistant", "content": content, "calls_before": len(calls)})
            start = len(calls)
            for tc in m.get("tool_calls") or ():
                if not isinstance(tc, Mapping):
                    continue
                name = tc.get("function")
                call = {
                    "name": name if isinstance(name, str) else "",
                    "arguments": text.value(tc.get("arguments")),
                    "observation": None,
                    "error": None,
                }
                calls.append(call)
                if isinstance(tc.get("id"), str):
                    by_id[tc["id"]] = call
            mark_batch(calls, start)
        elif role == "tool":
            ref = m.get("tool_call_id")
            found = by_id.pop(ref, None) if isinstance(ref, str) else None
            if found is None:  # no id: the earliest call without a result
                found = next((c for c in calls if c["observation"] is None and c["error"] is None), None)
            if found is None:
                continue
            found["observation"] = text(m.get("content"))
            error = m.get("error")
            if isinstance(error, Mapping):
                message, kind = error.get("message"), error.get("type")
                kind = kind[:40] if isinstance(kind, str) and kind else "error"
                said_error = text(message) if isinstance(message, str) else ""
                found["error"] = call_error(said_error or found["observation"] or kind, kind=kind)
    if not question:
        question = text(sample.get("input")) if isinstance(sample.get("input"), (str, list)) else ""
    data: dict[str, Any] = {
        "case_id": sample_id(sample),
        "question": question,
        "calls": calls,
        "answer": _answer(sample, text) or last,
        "messages": said,
    }
    epoch = sample.get("epoch")
    data["trial"] = epoch - 1 if type(epoch) is int and epoch >= 1 else 0
    value, _ = reward(sample)
    if value is not None:
        data["reward"] = value
    stopped = _stopped(sample)
    if stopped is not None:
        data["stopped"] = stopped
    usage = model_calls(sample.get("events"))
    if usage:
        data["model_calls"] = usage
    return data


def _answer(sample: Mapping[str, Any], text: _Text) -> str:
    output = sample.get("output")
    if not isinstance(output, Mapping):
        return ""
    completion = output.get("completion")
    if isinstance(completion, str) and completion.strip():
        return text(completion)
    choices = output.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, Mapping):
            return text(message.get("content"))
    return ""


def offered_tools(sample: Mapping[str, Any], into: dict[str, dict[str, Any]]) -> None:
    """The tools the sample's model events offered (the first definition of a name wins)."""
    events = sample.get("events")
    text = _Text(sample.get("attachments"))
    for e in events if isinstance(events, list) else ():
        if not isinstance(e, Mapping) or e.get("event") != "model":
            continue
        for tool in e.get("tools") or ():
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str) or tool["name"] in into:
                continue
            try:
                spec = ToolSpec.from_dict(
                    text.value({k: tool[k] for k in ("name", "description", "parameters") if k in tool})
                )
                _ = spec.validator
            except ToolSpecError:
                continue
            into[spec.name] = spec.contract()


# ---- the conversion --------------------------------------------------------------------------------------------


def convert(path: Path, options: Options, *, use_inspect_ai: bool | None = None) -> Conversion:
    source = str(path)
    limits = import_bounds()

    def converted(at: int, sample: Mapping[str, Any] | InvalidTrajectory, budget: AttachmentBudget) -> Converted:
        if isinstance(sample, InvalidTrajectory):
            return at, sample
        budget.start_sample()
        try:
            done = record_or_reason(at, lambda: sample_to_record(sample, budget), source=source, what="sample")
        except Overspent as exc:
            return at, InvalidTrajectory(
                f"sample {str(sample.get('id'))[:80]!r} epoch {sample.get('epoch')}: {exc}", index=at, source=source
            )
        if not isinstance(done[1], InvalidTrajectory):
            budget.end_sample()
        return done

    def new_budget() -> AttachmentBudget:
        return AttachmentBudget(limits.attachment_chars, limits.attachment_chars_total)

    header, passes = open_log(path, use_inspect_ai=use_inspect_ai, bounds=limits)

    def records() -> Iterator[Converted]:
        budget = new_budget()
        for at, sample in passes():
            yield converted(at, sample, budget)

    samples = passes()
    budget = new_budget()
    declared: dict[str, dict[str, Any]] = {}
    called: set[str] = set()
    cases: dict[str, dict[str, Any]] = {}
    scorers: set[str] = set()
    first_bad: InvalidTrajectory | None = None
    for at, sample in samples:
        _, traj = converted(at, sample, budget)
        if isinstance(sample, InvalidTrajectory) or isinstance(traj, InvalidTrajectory):
            if first_bad is None:
                first_bad = sample if isinstance(sample, InvalidTrajectory) else traj  # type: ignore[assignment]
            continue
        offered_tools(sample, declared)
        called.update(c.name for c in traj.calls)
        scorer = reward(sample)[1]
        if scorer:
            scorers.add(scorer)
        case = cases.setdefault(
            traj.case_id, {"id": traj.case_id, "question": traj.question or traj.case_id, "tags": ["inspect"]}
        )
        target = sample.get("target")
        target = (
            target
            if isinstance(target, str)
            else ", ".join(t for t in target if isinstance(t, str))
            if isinstance(target, list)
            else ""
        )
        if target.strip() and "notes" not in case:
            case["notes"] = [f"target: {target[:2000]}"]
    if not cases and first_bad is not None:  # nothing readable: say why, not that no tool was called
        raise first_bad
    spec = header.get("eval")
    task = spec.get("task") if isinstance(spec, Mapping) else None
    task = task if isinstance(task, str) and task else path.stem
    notes: list[str] = []
    if options.tools is None and declared:
        toolset = toolset_document(list(declared.values()), name=task)
        notes.append(f"no --tools: toolset of the {len(declared)} tools the log's model events were offered")
        unknown = called - declared.keys()
        if unknown:
            notes.append(
                f"{len(unknown)} called tool names are not among the tools offered (they count as "
                f"hallucinated tools): {', '.join(sorted(unknown)[:5])}"
            )
    else:
        toolset, more = resolve_toolset(options.tools, options.domain, lambda: called, name=task)
        notes.extend(more)
    if newer_than_known(header) and not inspect_ai_installed():
        notes.append(
            f"log version {header.get('version')} is newer than ToolLens reads itself ({KNOWN_VERSION}): "
            "read as version 2; `pip install 'toollens[inspect]'` reads it with Inspect's own reader"
        )
    if len(scorers) > 1:
        notes.append(f"the reward is each sample's first numeric or C/I score (scorers: {', '.join(sorted(scorers))})")
    suite = {"name": f"inspect {task}", "toolset": toolset, "cases": list(cases.values())}
    return Conversion(suite=suite, records=records, notes=notes)
