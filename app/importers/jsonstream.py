"""Streaming JSON values out of a file, in bounded memory.

Sources come as JSON Lines (one value per line) or as one JSON array of
values (tau-bench, many log exporters); a 1 GB array must not be loaded
whole. An array is read in chunks and decoded element by element with the
standard library's C scanner; each value carries the line it starts on.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.core.errors import InvalidTrajectory
from app.core.records import MAX_LINE_BYTES, json_error, loads

CHUNK = 1 << 20
MAX_VALUE_CHARS = MAX_LINE_BYTES  # one conversation, one task, one export request
WHOLE_DOCUMENT_BYTES = 256 * 1024 * 1024  # a single pretty-printed object (an OTLP JSON file)

JsonItem = tuple[int, Any | InvalidTrajectory]
JSON_VALUES = "TOOLLENS_IMPORT_MAX_JSON_VALUES"
_SCAN = 1 << 22


def json_values(raw: bytes | str, stop: int) -> int:
    """An upper bound on the JSON values ``raw`` builds: its ``{``, ``[`` and
    ``,`` (a comma inside a text counts too), counted at C speed a few
    megabytes at a time, stopping once past ``stop``."""
    n = 0
    for start in range(0, len(raw), _SCAN):
        end = start + _SCAN
        if isinstance(raw, str):
            n += raw.count("{", start, end) + raw.count("[", start, end) + raw.count(",", start, end)
        else:
            n += raw.count(b"{", start, end) + raw.count(b"[", start, end) + raw.count(b",", start, end)
        if n > stop:
            break
    return n


def iter_json_values(path: Path, *, whole_object: bool = False) -> Iterator[JsonItem]:
    """Yield ``(line, value)`` for each value of a JSON Lines file or of a
    top-level JSON array; a value that does not parse is yielded as an
    InvalidTrajectory naming its line. A truncated array ends with one.

    ``whole_object``: a file holding one (pretty-printed) JSON object is
    yielded as a single value (up to ``WHOLE_DOCUMENT_BYTES``)."""
    source = str(path)
    if not path.is_file():
        raise InvalidTrajectory("file not found", source=source)
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if head == b"[" and not _lines_of_arrays(path):
        yield from _iter_array(path)
        return
    if head == b"{" and whole_object and _several_lines(path):
        yield _whole(path)
        return
    if head == b"{":
        refuse_one_object(path)
    yield from _iter_lines(path)


def refuse_one_object(path: Path) -> None:
    """Raise, saying so, when the file is one pretty-printed JSON object (a
    ToolBench answer file, an exported document) given to a format that reads
    one value per line; otherwise each line's error would be reported, or
    nothing found at all. Costs one read of the first line unless it is."""
    if not _several_lines(path) or path.stat().st_size > WHOLE_DOCUMENT_BYTES:
        return
    try:
        whole = loads(path.read_bytes())
    except (ValueError, RecursionError):
        return  # broken JSON Lines: each line says what is wrong
    if isinstance(whole, dict):
        raise InvalidTrajectory(
            "the file is one pretty-printed JSON object; this format reads JSON Lines "
            "(one value per line) or a JSON array of values",
            source=str(path),
        )


def _several_lines(path: Path) -> bool:
    """The file starts with a JSON document spread over several lines: its
    first line is not JSON on its own."""
    try:
        loads(_first_line(path))
    except ValueError:
        return True
    return False


def _lines_of_arrays(path: Path) -> bool:
    """JSON Lines whose values are arrays (a bare message list per line),
    rather than one array: the first line is a whole JSON value and more
    lines follow."""
    with path.open("rb") as fh:
        first = fh.readline(MAX_LINE_BYTES + 1)
        if len(first) > MAX_LINE_BYTES:
            return False
        try:
            loads(first)
        except ValueError:
            return False
        return any(line.strip() for line in iter(lambda: fh.readline(1 << 16), b""))


def _first_line(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.readline(MAX_LINE_BYTES + 1)


def _whole(path: Path) -> JsonItem:
    try:
        return 1, read_document(path)
    except InvalidTrajectory as exc:
        return 1, exc


def read_document(path: Path, *, hint: str = "write it as JSON Lines (one object per line)") -> Any:
    """A file that is one JSON document (a results file, a log), up to
    ``WHOLE_DOCUMENT_BYTES``; raises InvalidTrajectory naming the file."""
    source = str(path)
    if not path.is_file():
        raise InvalidTrajectory("file not found", source=source)
    if path.stat().st_size > WHOLE_DOCUMENT_BYTES:
        raise InvalidTrajectory(
            f"one JSON document larger than {WHOLE_DOCUMENT_BYTES} bytes: {hint}", index=1, source=source
        )
    return decode_document(path.read_bytes(), source)


def decode_document(raw: bytes, source: str) -> Any:
    """JSON bytes already read within a bound, decoded (a clear error otherwise)."""
    try:
        return loads(raw)
    except ValueError as exc:
        raise InvalidTrajectory(f"not valid JSON ({exc})", index=1, source=source) from None
    except RecursionError:
        raise InvalidTrajectory("nested too deeply", index=1, source=source) from None


def _iter_lines(path: Path) -> Iterator[JsonItem]:
    source = str(path)
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            if len(line) > MAX_LINE_BYTES:
                yield number, InvalidTrajectory(f"line longer than {MAX_LINE_BYTES} bytes", index=number, source=source)
                continue
            try:
                yield number, loads(line)
            except ValueError as exc:
                hint = " (truncated?)" if not line.endswith(b"\n") else ""
                yield number, InvalidTrajectory(json_error(exc, line) + hint, index=number, source=source)


_SPACE = " \t\r\n"


def _iter_array(path: Path) -> Iterator[JsonItem]:
    """Elements of a top-level array, one at a time."""
    source = str(path)
    decoder = json.JSONDecoder()
    reader = codecs.getincrementaldecoder("utf-8-sig")()
    buf = ""
    pos = 0
    line = 1  # line of buf[pos]
    eof = False
    started = False
    after_value = False
    want = CHUNK

    with path.open("rb") as fh:

        def more(n: int) -> bool:
            nonlocal buf, pos, eof
            if eof:
                return False
            data = fh.read(n)
            try:
                text = reader.decode(data, final=not data)
            except UnicodeDecodeError as exc:
                raise InvalidTrajectory(f"not UTF-8 text ({exc.reason})", index=line, source=source) from None
            buf = buf[pos:] + text
            pos = 0
            if not data:
                eof = True
            return True

        def skip_space() -> None:
            nonlocal pos, line
            while True:
                n = len(buf)
                while pos < n and buf[pos] in _SPACE:
                    if buf[pos] == "\n":
                        line += 1
                    pos += 1
                if pos < n or not more(CHUNK):
                    return

        while True:
            skip_space()
            if pos >= len(buf):
                yield line, InvalidTrajectory("truncated file: the JSON array is not closed", index=line, source=source)
                return
            ch = buf[pos]
            if not started:
                started = True
                pos += 1  # the "[" checked by the caller
                continue
            if ch == "]":
                pos += 1
                skip_space()
                if pos < len(buf):
                    yield line, InvalidTrajectory("unexpected text after the JSON array", index=line, source=source)
                return
            if ch == "," and after_value:
                pos += 1
                after_value = False
                continue
            if after_value or ch == ",":
                yield (
                    line,
                    InvalidTrajectory(
                        f"not valid JSON (',' or ']' expected between elements, got {ch!r})", index=line, source=source
                    ),
                )
                return
            start_line = line
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError as exc:
                    if len(buf) - pos > MAX_VALUE_CHARS or not more(want):
                        at = start_line + buf.count("\n", pos, exc.pos)
                        if not eof:
                            reason = f"an array element longer than {MAX_VALUE_CHARS} characters (or broken JSON)"
                        elif buf.rstrip().endswith("]"):  # complete file, broken element: where it breaks
                            reason = f"not valid JSON ({exc.msg})"
                        else:
                            reason = "truncated file: the array element starting here is cut short"
                            at = start_line
                        yield at, InvalidTrajectory(reason, index=at, source=source)
                        return
                    want = min(want * 2, MAX_VALUE_CHARS)
                    continue
                except RecursionError:
                    yield start_line, InvalidTrajectory("nested too deeply", index=start_line, source=source)
                    return
                break
            want = CHUNK
            line += buf.count("\n", pos, end)
            pos = end
            after_value = True
            yield start_line, value


# ---- one JSON object, its big array read an element at a time (an Inspect .json log) ---------------------------


class _Reader:
    """A UTF-8 file read in chunks as text, with the byte offset of any position kept."""

    def __init__(self, fh: Any, source: str, base: int = 0) -> None:
        self.fh, self.source = fh, source
        self.decoder = codecs.getincrementaldecoder("utf-8-sig" if base == 0 else "utf-8")()
        self.buf, self.pos, self.eof = "", 0, False
        self.mark_pos, self.mark_bytes = 0, base  # the byte offset of buf[mark_pos]
        if base == 0:
            head = fh.read(3)
            self.mark_bytes = 3 if head == codecs.BOM_UTF8 else 0
            fh.seek(self.mark_bytes)

    def offset(self) -> int:
        """The byte offset of ``buf[pos]`` in the file."""
        if self.pos != self.mark_pos:
            part = self.buf[self.mark_pos : self.pos]
            self.mark_bytes += len(part) if part.isascii() else len(part.encode("utf-8"))
            self.mark_pos = self.pos
        return self.mark_bytes

    def more(self, n: int = CHUNK) -> bool:
        if self.eof:
            return False
        base = self.offset()
        data = self.fh.read(n)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise InvalidTrajectory(f"not UTF-8 text ({exc.reason}) after byte {base}", source=self.source) from None
        self.buf, self.pos = self.buf[self.pos :] + text, 0
        self.mark_pos, self.mark_bytes = 0, base
        self.eof = not data
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < n:
                return self.buf[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        ch = self.peek()
        if not ch or ch not in chars:
            found = repr(ch) if ch else "the end of the file"
            raise InvalidTrajectory(
                f"not valid JSON ({what} expected at byte {self.offset()}, found {found})", source=self.source
            )
        self.pos += 1
        return ch

    def value(self, max_chars: int, max_values: int, what: str) -> Any:
        """The next JSON value, at most ``max_chars`` characters and ``max_values``
        values (counted once it is larger than a chunk, before it is decoded)."""
        self.peek()
        start = self.offset()
        want = CHUNK
        decoder = json.JSONDecoder()
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                held = len(self.buf) - self.pos
                if held > max_chars:
                    raise InvalidTrajectory(
                        f"{what} at byte {start} is larger than {max_chars} characters "
                        "(TOOLLENS_IMPORT_MAX_MEMBER_BYTES)",
                        source=self.source,
                    ) from None
                if held > CHUNK and json_values(self.buf[self.pos :], max_values) > max_values:
                    raise InvalidTrajectory(
                        f"{what} at byte {start} would build more than {max_values} JSON values ({JSON_VALUES})",
                        source=self.source,
                    ) from None
                if not self.more(want):
                    cut = exc.msg.startswith("Unterminated") or not self.buf[exc.pos :].strip()
                    reason = "truncated file" if cut else f"not valid JSON ({exc.msg})"
                    raise InvalidTrajectory(f"{what} at byte {start}: {reason}", source=self.source) from None
                want = min(want * 2, max(max_chars, CHUNK))
                continue
            except RecursionError:
                raise InvalidTrajectory(f"{what} at byte {start}: nested too deeply", source=self.source) from None
            if end - self.pos > max_chars:
                raise InvalidTrajectory(
                    f"{what} at byte {start} is larger than {max_chars} characters (TOOLLENS_IMPORT_MAX_MEMBER_BYTES)",
                    source=self.source,
                )
            self.pos = end
            return value


def iter_object(path: Path, stream: str, *, max_chars: int, max_values: int) -> Iterator[tuple[str, Any, int]]:
    """The members of a file that is one JSON object, in bounded memory:
    ``(key, value, -1)`` for each member but ``stream``, and for the array
    under ``stream`` ``(stream, element, byte offset)``, one element at a
    time (``value_at`` reads one again). Each value is bounded by
    ``max_chars`` and ``max_values``; a broken file raises InvalidTrajectory."""
    source = str(path)
    with path.open("rb") as fh:
        r = _Reader(fh, source)
        r.expect("{", "'{'")
        if r.peek() == "}":
            r.pos += 1
            return
        while True:
            key = r.value(MAX_VALUE_CHARS, max_values, "a key")
            if not isinstance(key, str):
                raise InvalidTrajectory(f"not valid JSON (a key is a string, at byte {r.offset()})", source=source)
            r.expect(":", "':'")
            if key == stream and r.peek() == "[":
                r.pos += 1
                if r.peek() == "]":
                    r.pos += 1
                else:
                    while True:
                        r.peek()
                        at = r.offset()
                        yield key, r.value(max_chars, max_values, f"{stream}[]"), at
                        if r.expect(",]", "',' or ']'") == "]":
                            break
            else:
                yield key, r.value(max_chars, max_values, repr(key[:80])), -1
            if r.expect(",}", "',' or '}'") == "}":
                break
        if r.peek():
            raise InvalidTrajectory(f"unexpected text after the JSON object (byte {r.offset()})", source=source)


def value_at(path: Path, offset: int, *, max_chars: int, max_values: int, what: str = "a value") -> Any:
    """The JSON value starting at byte ``offset`` (one that ``iter_object`` gave)."""
    with path.open("rb") as fh:
        fh.seek(offset)
        return _Reader(fh, str(path), base=offset).value(max_chars, max_values, what)
