"""Writing cases into a user's suite file without ever losing it.

The new content goes to a temporary file in the same folder, flushed to disk,
then renamed over the old one: a process killed at any moment leaves the old
file or the new one, never a part of either. In a YAML file the new cases are
inserted as text after the last case, in the file's own line endings, so every
byte already there stays; nothing to add writes nothing. A symbolic link is
written through only when asked, and never when its target is missing; a
result past ``MAX_SUITE_BYTES`` (what loading refuses) is refused too.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from app.core.errors import SuiteError
from app.core.suites.suite import MAX_SUITE_BYTES, SAFE_LOADER


def target(path: Path, *, follow_symlinks: bool) -> Path:
    """The file to write: ``path``, or with ``follow_symlinks`` the existing
    file its link points at. Refused: a link not asked for, a dangling link,
    anything but a regular file."""
    if path.is_symlink():
        if not follow_symlinks:
            raise SuiteError(
                "is a symbolic link: give --follow-symlinks to write to the file it points at", path=str(path)
            )
        real = path.resolve()
        if not real.is_file():
            raise SuiteError(f"is a symbolic link to {real}, which is not an existing file", path=str(path))
        return real
    if path.exists() and not path.is_file():
        raise SuiteError("is not a regular file", path=str(path))
    return path


def check_shape(document: Any, path: Path) -> dict[str, Any]:
    """The decoded file as a suite mapping whose ``cases`` is a list, or a one-line error."""
    if document is None:
        raise SuiteError("is empty: a suite is a mapping with name, toolset and cases", path=str(path))
    if isinstance(document, list):
        raise SuiteError("holds a list at the top: a suite is a mapping with name, toolset and cases", path=str(path))
    if not isinstance(document, Mapping):
        raise SuiteError(
            f"holds a {type(document).__name__} at the top: a suite is a mapping with name, toolset and cases",
            path=str(path),
        )
    cases = document.get("cases")
    if cases is not None and not isinstance(cases, list):
        raise SuiteError(f"its cases are a {type(cases).__name__}, not a list", path=str(path))
    return dict(document)


def _end_marker(text: str) -> bool:
    return any(line.rstrip() == "..." for line in text.splitlines())


def _insert_yaml(text: str, document: Mapping[str, Any], added: list[dict[str, Any]]) -> str | None:
    """``text`` with ``added`` inserted after its last block-list case, in its
    indentation and line endings; None when the file has no such list."""
    try:
        root = yaml.compose(text, Loader=SAFE_LOADER)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    found = [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "cases"]
    if len(found) != 1:
        return None
    cases = found[0][1]
    if not isinstance(cases, yaml.SequenceNode) or not cases.value or cases.flow_style:
        return None
    first = cases.value[0].start_mark.index
    line = text[text.rfind("\n", 0, first) + 1 : first].rstrip()
    if not line.endswith("-"):
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    pad = " " * (len(line) - 1)
    block = yaml.safe_dump(added, sort_keys=False, allow_unicode=True, width=120)
    rows = "".join(
        pad + row.rstrip("\n") + newline if row.strip() else newline for row in block.splitlines(keepends=True)
    )
    if root.value[-1][0] is found[0][0]:  # cases is the last key: at the end of the file
        new = text + ("" if text.endswith("\n") else newline) + rows
    else:  # after the last case's own lines: blank and comment lines before the next key stay before it
        if cases.end_mark.column != 0:
            return None
        at = cases.end_mark.index
        while at > 0:
            start = text.rfind("\n", 0, at - 1) + 1
            if text[start:at].strip() and not text[start:at].lstrip().startswith("#"):
                break
            at = start
        new = text[:at] + rows + text[at:]
    try:
        same = yaml.load(new, Loader=SAFE_LOADER) == document
    except yaml.YAMLError:
        return None
    return new if same else None


def render(path: Path, old: bytes | None, document: Mapping[str, Any], added: list[dict[str, Any]]) -> bytes:
    """The new bytes of the file: the old ones with the cases inserted, or
    (JSON, a new file, a YAML file whose cases are no block list) written whole."""
    text = old.decode("utf-8") if old is not None else None
    if path.suffix.lower() == ".json":
        return (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    if text is not None:
        if _end_marker(text):
            raise SuiteError(
                "ends its YAML document with `...`: remove that line to let cases be added", path=str(path)
            )
        new = _insert_yaml(text.removeprefix("\ufeff"), document, added)
        if new is not None:
            return (("\ufeff" if text.startswith("\ufeff") else "") + new).encode("utf-8")
    return yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True, width=120).encode("utf-8")


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def replace_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk,
    then rename it over ``path`` (keeping the old file's permissions; a new
    file gets the umask's, not the temporary file's 0600)."""
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself on disk
        dirfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


def write_cases(path: Path, old: bytes | None, document: Mapping[str, Any], added: list[dict[str, Any]]) -> bool:
    """Write the suite ``document`` (the file's, ``added`` at the end of its
    cases) to ``path`` (already resolved by ``target``) whose bytes were ``old``
    (None: a new file). Nothing added to an existing file writes nothing.
    True when written."""
    if old is not None and not added:
        return False
    data = render(path, old, document, added)
    if len(data) > MAX_SUITE_BYTES:
        raise SuiteError(
            f"would be larger than {MAX_SUITE_BYTES} bytes (the most a suite file may be): "
            "write the cases to another file",
            path=str(path),
        )
    replace_atomically(path, data)
    return True
