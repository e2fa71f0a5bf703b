"""Reading the members of a zip archive (an Inspect ``.eval`` log) within
bounds: the central directory's size and entry count are read from the end
record before ``zipfile`` builds its index; each member's size is checked
before it is read and read with a running bound, so a zip bomb (a small
archive that inflates to gigabytes, or a header that lies about a size)
costs at most one member's bound of memory.

Newer Inspect logs compress their members with Zstandard (method 93), which
Python's ``zipfile`` reads from 3.14 only: the ``zstandard`` package (a
dependency of ToolLens before 3.14) decompresses them here, in bounded chunks.
"""

from __future__ import annotations

import importlib.util
import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from app.core.errors import InvalidTrajectory

ZIP_ZSTANDARD = 93
MAX_MEMBERS = 200_000
MAX_DIRECTORY_BYTES = 64 * 1024 * 1024
MAX_MEMBER_BYTES = 256 * 1024 * 1024  # one sample (messages, events, attachments); TOOLLENS_IMPORT_MAX_MEMBER_BYTES
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_LOCAL_HEADER = b"PK\x03\x04"
_CHUNK = 1 << 20


def _directory(fh: BinaryIO, size: int) -> tuple[int, int]:
    """(entries, bytes) of the central directory, from the end record (zip64 aware)."""
    tail_len = min(size, 22 + 65_535)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        raise zipfile.BadZipFile("no end of central directory record")
    entries, cd_bytes = struct.unpack("<HL", tail[at + 10 : at + 16])
    if (entries == 0xFFFF or cd_bytes == 0xFFFFFFFF) and at >= 20 and tail[at - 20 : at - 16] == _EOCD64_LOCATOR:
        (offset,) = struct.unpack("<Q", tail[at - 12 : at - 4])
        fh.seek(offset)
        record = fh.read(56)
        if len(record) < 56 or record[:4] != _EOCD64:
            raise zipfile.BadZipFile("broken zip64 end record")
        entries, cd_bytes = struct.unpack("<QQ", record[32:48])
    return entries, cd_bytes


def open_archive(path: Path) -> zipfile.ZipFile:
    """The archive, once its directory is known to fit the bounds."""
    source = str(path)
    try:
        with path.open("rb") as fh:
            entries, cd_bytes = _directory(fh, path.stat().st_size)
        if entries > MAX_MEMBERS or cd_bytes > MAX_DIRECTORY_BYTES:
            raise InvalidTrajectory(
                f"an archive of more than {MAX_MEMBERS} members or a directory of more than "
                f"{MAX_DIRECTORY_BYTES} bytes",
                source=source,
            )
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, struct.error, OSError) as exc:
        raise InvalidTrajectory(f"not a readable zip archive ({exc})", source=source) from None


def check_sizes(archive: zipfile.ZipFile, source: str, limit: int = MAX_MEMBER_BYTES) -> None:
    """Refuse an archive whose members declare more than the bound."""
    for info in archive.infolist():
        if info.file_size > limit or info.compress_size > limit:
            raise InvalidTrajectory(
                f"member {info.filename[:200]!r} is larger than {limit} bytes (TOOLLENS_IMPORT_MAX_MEMBER_BYTES)",
                source=source,
            )


def read_member(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    source: str,
    limit: int = MAX_MEMBER_BYTES,
    check: Callable[[bytes], None] | None = None,
) -> bytes:
    """A member's bytes, read with a running bound and checked (size, CRC);
    ``check`` sees each chunk as it is inflated (and may raise to stop early)."""
    where = f"{source}: {info.filename[:200]}"
    if info.file_size > limit or info.compress_size > limit:
        raise InvalidTrajectory(f"larger than {limit} bytes (TOOLLENS_IMPORT_MAX_MEMBER_BYTES)", source=where)
    try:
        if info.compress_type == ZIP_ZSTANDARD and (_zstandard() or not hasattr(zipfile, "ZIP_ZSTANDARD")):
            data = _zstd(_raw(archive, info), info.file_size, where, check)
        else:
            out = bytearray()
            with archive.open(info) as fh:
                while len(out) <= info.file_size:
                    chunk = fh.read(min(_CHUNK, info.file_size + 1 - len(out)))
                    if not chunk:
                        break
                    if check is not None:
                        check(chunk)
                    out += chunk
            data = bytes(out)
            del out
    except (zipfile.BadZipFile, NotImplementedError, OSError, zlib.error, EOFError) as exc:
        raise InvalidTrajectory(f"cannot read this member ({exc})", source=where) from None
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise InvalidTrajectory("the member's size or checksum does not match its header", source=where)
    return data


def _raw(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A member's compressed bytes, after its local header."""
    fp = archive.fp
    if fp is None:
        raise zipfile.BadZipFile("the archive is closed")
    fp.seek(info.header_offset)
    header = fp.read(30)
    if len(header) < 30 or header[:4] != _LOCAL_HEADER:
        raise zipfile.BadZipFile("bad local file header")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    fp.seek(info.header_offset + 30 + name_len + extra_len)
    return fp.read(info.compress_size)


def _zstandard() -> bool:
    """Whether the ``zstandard`` package is there (its reader is bounded; a
    patched ``zipfile`` decompresses a whole chunk at once)."""
    return importlib.util.find_spec("zstandard") is not None


def _zstd(raw: bytes, expected: int, where: str, check: Callable[[bytes], None] | None = None) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise InvalidTrajectory(
            "a Zstandard-compressed archive: this Python needs the `zstandard` package (pip install zstandard)",
            source=where,
        ) from None
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True) as reader:
            while len(out) <= expected:
                chunk = reader.read(_CHUNK)
                if not chunk:
                    break
                if check is not None:
                    check(chunk)
                out += chunk
    except zstandard.ZstdError as exc:
        raise InvalidTrajectory(f"broken Zstandard data ({exc})", source=where) from None
    return bytes(out)
