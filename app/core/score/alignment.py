"""Alignment of executed calls to the expected calls (docs/metrics.md).

Plain position (``zip``) misattributes everything after one extra call, so
the default is a minimum edit-distance alignment over tool names
(substitution, insertion and deletion each cost 1; ties prefer substitution so
that confusions reach the matrix, and earlier pairings over later ones). A
retry of the same tool right after an error observation collapses onto the
same expected step. The match modes ``unordered``, ``subset`` and
``superset`` match calls as a multiset instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(slots=True, init=False)
class Alignment:
    """``step_of_call[i]`` is the expected step call ``i`` is aligned to (None:
    an extra call); ``call_of_step[j]`` the first call aligned to step ``j``
    (None: a missing step)."""

    step_of_call: list[int | None]
    call_of_step: list[int | None]

    def __init__(self, step_of_call: list[int | None], call_of_step: list[int | None]) -> None:
        # written out, not frozen: compiled, a native __init__ (records.py says why)
        self.step_of_call = step_of_call
        self.call_of_step = call_of_step


def group_retries(names: Sequence[str], errored: Sequence[bool]) -> list[int]:
    """Index of the attempt group of each call: a call of the same tool right
    after a call that errored joins that call's group."""
    groups: list[int] = []
    g = -1
    for i, name in enumerate(names):
        if i > 0 and errored[i - 1] and names[i - 1] == name:
            groups.append(g)
        else:
            g += 1
            groups.append(g)
    return groups


def _edit_pairs(got: Sequence[str], want: Sequence[str]) -> list[int | None]:
    """For each item of ``got``, the index in ``want`` it pairs with, or None."""
    n, m = len(got), len(want)
    if got == want:
        return list(range(n))
    if n == 0:
        return []
    if m == 0:
        return [None] * n
    # A common first item is always paired (d(a+x, a+y) = d(x, y), and the walk
    # below prefers the pairing on ties): solve only what follows the common prefix.
    p = 0
    while p < n and p < m and got[p] == want[p]:
        p += 1
    if p:
        rest = _edit_pairs(got[p:], want[p:])
        return [*range(p), *(None if j is None else j + p for j in rest)]
    # cost[i][j]: cheapest alignment of got[i:] with want[j:]
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        cost[i][m] = n - i
    for j in range(m - 1, -1, -1):
        cost[n][j] = m - j
    for i in range(n - 1, -1, -1):
        row, below = cost[i], cost[i + 1]
        gi = got[i]
        for j in range(m - 1, -1, -1):
            diag = below[j + 1] + (0 if gi == want[j] else 1)
            ins = below[j] + 1
            dele = row[j + 1] + 1
            row[j] = diag if diag <= ins and diag <= dele else (ins if ins <= dele else dele)
    pairs: list[int | None] = [None] * n
    i = j = 0
    while i < n and j < m:
        here = cost[i][j]
        if here == cost[i + 1][j + 1] + (0 if got[i] == want[j] else 1):
            pairs[i] = j
            i += 1
            j += 1
        elif here == cost[i + 1][j] + 1:
            i += 1  # extra call
        else:
            j += 1  # missing step
    return pairs


def _multiset_pairs(
    got: Sequence[str], want: Sequence[str], pair_leftovers: bool, fits: Callable[[int, int], bool] | None
) -> list[int | None]:
    pairs: list[int | None] = [None] * len(got)
    free = list(range(len(want)))
    # first the calls whose arguments fit a step of the same tool, then by name alone
    passes = [True, False] if fits is not None else [False]
    for need_fit in passes:
        for i, name in enumerate(got):
            if pairs[i] is not None:
                continue
            for k, j in enumerate(free):
                if want[j] == name and (not need_fit or (fits is not None and fits(i, j))):
                    pairs[i] = j
                    del free[k]
                    break
    if pair_leftovers:
        for i in range(len(got)):
            if pairs[i] is None and free:
                pairs[i] = free.pop(0)
    return pairs


def align(
    names: Sequence[str],
    errored: Sequence[bool],
    expected: Sequence[str],
    match: str = "strict",
    fits: Callable[[int, int], bool] | None = None,
) -> Alignment:
    """Align executed call names to expected names.

    ``errored[i]`` says whether call ``i`` got an error observation (for retry
    collapsing). In ``subset`` mode unpaired calls stay extra (they are
    allowed); in ``unordered`` and ``superset`` leftover calls pair with
    leftover steps so that confusions are counted. In these multiset modes
    ``fits(call, step)`` (arguments acceptable) lets two calls of one tool pair
    with the steps whose arguments they carry, in whatever order they came.
    """
    if any(errored):
        groups = group_retries(names, errored)
        heads: list[str] = []
        for i, g in enumerate(groups):
            if g == len(heads):
                heads.append(names[i])
    else:  # no error, no retry to collapse: every call is its own attempt
        groups = list(range(len(names)))
        heads = list(names)
    if match == "strict":
        group_pairs = _edit_pairs(heads, expected)
    else:
        head_call = [groups.index(g) for g in range(len(heads))]
        group_fits = None if fits is None else (lambda g, j: fits(head_call[g], j))
        group_pairs = _multiset_pairs(heads, expected, match != "subset", group_fits)
    step_of_call = [group_pairs[g] for g in groups]
    call_of_step: list[int | None] = [None] * len(expected)
    for i, step in enumerate(step_of_call):
        if step is not None and call_of_step[step] is None:
            call_of_step[step] = i
    return Alignment(step_of_call, call_of_step)
