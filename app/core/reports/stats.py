"""Small statistics for comparing runs: so that a delta that is noise reads
as noise."""

from __future__ import annotations

import math


def wilson_interval(num: int, den: int, z: float = 1.959963984540054) -> tuple[float, float] | None:
    """95% Wilson score interval of num/den (None when den is 0)."""
    if den <= 0:
        return None
    p = num / den
    denom = 1 + z * z / den
    centre = (p + z * z / (2 * den)) / denom
    half = z * math.sqrt(p * (1 - p) / den + z * z / (4 * den * den)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs: cases that
    passed only in run A and cases that passed only in run B (a binomial test
    of the smaller count against n/2)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    # P(X <= k), X ~ Binomial(n, 1/2), summed from its largest term down in floats: the terms shrink
    # fast, so this takes O(sqrt(n)) steps (big-integer binomials took minutes at n = 10^5)
    log_top = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2)
    total, term = 0.0, 1.0
    for i in range(k, -1, -1):
        total += term
        if term < 1e-17 * total:
            break
        term *= i / (n - i + 1)
    return min(1.0, 2 * math.exp(log_top) * total)


def newcombe_interval(num_a: int, den_a: int, num_b: int, den_b: int) -> tuple[float, float] | None:
    """95% interval of the difference of two proportions, B minus A
    (Newcombe's hybrid score method, from the two Wilson intervals)."""
    wa, wb = wilson_interval(num_a, den_a), wilson_interval(num_b, den_b)
    if wa is None or wb is None:
        return None
    pa, pb = num_a / den_a, num_b / den_b
    d = pb - pa
    lower = d - math.sqrt((pb - wb[0]) ** 2 + (wa[1] - pa) ** 2)
    upper = d + math.sqrt((wb[1] - pb) ** 2 + (pa - wa[0]) ** 2)
    return lower, upper


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters over the same items: (po - pe) / (1 - pe).
    None without items; 1.0 when both raters always give one same label."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    labels = {a for a, _ in pairs} | {b for _, b in pairs}
    expected = sum((sum(1 for a, _ in pairs if a == x) / n) * (sum(1 for _, b in pairs if b == x) / n) for x in labels)
    if expected >= 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - expected) / (1 - expected)
