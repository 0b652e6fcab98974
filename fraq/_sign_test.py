"""The sign test of a median over paired rounds, at one look or at several nested looks.

A per-round ratio of two calls' times has, under "no difference" (the two calls' times
exchangeable within a round), a median of 1: each ratio is above 1 with probability 1/2,
independently of the rounds before it, so S_n, the count of ratios above 1 among the first
n, is Binomial(n, 1/2). The two-sided sign test with critical count c at n rejects "median
1" when S_n <= c or S_n >= n - c, and its interval for the median is [x_(j), x_(n+1-j)]
(order statistics, 1-based) with rank j = c + 1: the median m is outside it exactly when
the test of "median m" rejects.

**Several looks.** Rounds that stop at the first look that rejects, among the sample counts
``looks`` (6, 7, ..., 12 for rounds that stop once decided between 6 and 12), reject
wrongly with the probability that *any* look rejects, more than any one look's level:
testing every look at 95% wrongly decides 7.1% of the time at 6..12, against 3.1-3.9% at
one fixed n. The looks are nested (the first n ratios of look n are those of every later
look), so that probability is exact by dynamic programming over the running count S: carry
P(S_n = s, no earlier look rejected) from n to n + 1 (half to s, half to s + 1) and, at a
look, move the mass of the rejecting counts into the total.

:func:`sign_ranks` chooses the critical counts as an exact group-sequential test of the
Pocock kind (one nominal level at every look): the largest nominal level a such that the
counts c_n(a) = max {c : 2 P(Bin(n, 1/2) <= c) <= a}, used at every look, reject with total
probability at most 1 - ``level``. The nominal levels worth trying are the finitely many
tail probabilities 2 P(Bin(n, 1/2) <= c) of the looks, and the total grows with a, so the
largest passing one is found by trying them in order. One look gives the fixed-n sign test
(at 95%: no interval below n = 6, j = 1 at 6..8, 2 at 9..11, 3 at 12). At the looks 6..12
every look keeps c = 0 to n = 9 and c = 1 from 10 on, and the total is 176 / 4096 = 4.30%.

The intervals at the looks are *repeated confidence intervals* (Jennison and Turnbull,
*Group Sequential Methods with Applications to Clinical Trials*, Chapman & Hall 2000,
Ch. 9): for any rule that stops at a sample count among ``looks`` (the first decided look,
the smallest of several points' stops, the sum of several launches' stops), the interval at
the stop misses the true median with probability at most the total, since missing it at the
stop means the test of the true median rejected at some look. Concatenated launches keep
this: each ratio is a fresh draw independent of the ones before it, whatever rule ended the
launch before. The sign test itself: Hollander, Wolfe and Chicken, *Nonparametric
Statistical Methods*, 3rd ed. (Wiley 2014), Sec. 3.6.

All probabilities are exact: counts of the 2^n sign sequences, in integers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from fractions import Fraction

__all__ = ["sign_error", "sign_ranks"]


def _looks(looks: Iterable[int]) -> tuple[int, ...]:
    out = tuple(sorted({int(n) for n in looks}))
    if not out or out[0] < 1:
        raise ValueError(f"looks(={sorted(set(looks))}) must be sample counts of at least 1, at least one")
    return out


def _tail(n: int, c: int) -> Fraction:
    """2 P(Bin(n, 1/2) <= c): the two-sided level of critical count c at n."""
    return Fraction(2 * sum(math.comb(n, i) for i in range(c + 1)), 2**n)


def _error(looks: tuple[int, ...], counts: dict[int, int]) -> Fraction:
    """P(some look n rejects: S_n <= counts[n] or S_n >= n - counts[n]) under Bin(n, 1/2) signs."""
    paths, total = {0: 1}, 0  # S -> the sign sequences reaching it that no look has rejected
    for n in range(1, looks[-1] + 1):
        nxt: dict[int, int] = {}
        for s, k in paths.items():
            nxt[s] = nxt.get(s, 0) + k
            nxt[s + 1] = nxt.get(s + 1, 0) + k
        paths = nxt
        c = counts.get(n, -1)
        if c >= 0:
            for s in [s for s in paths if s <= c or s >= n - c]:
                total += paths.pop(s) * 2 ** (looks[-1] - n)
    return Fraction(total, 2 ** looks[-1])


def _counts(looks: tuple[int, ...], a: Fraction) -> dict[int, int]:
    out = {}
    for n in looks:
        c = -1
        while 2 * (c + 1) < n and _tail(n, c + 1) <= a:
            c += 1
        out[n] = c
    return out


@functools.lru_cache(maxsize=256)
def _ranks(looks: tuple[int, ...], level: float) -> tuple[tuple[int, int | None], ...]:
    alpha = Fraction(1) - Fraction(level)
    best = {n: -1 for n in looks}
    for a in sorted({_tail(n, c) for n in looks for c in range((n + 1) // 2)}):
        counts = _counts(looks, a)
        if _error(looks, counts) > alpha:
            break
        best = counts
    return tuple((n, c + 1 if c >= 0 else None) for n, c in best.items())


def sign_ranks(looks: Iterable[int], level: float = 0.95) -> dict[int, int | None]:
    """Per look n, the rank j of the sign-test interval [x_(j), x_(n+1-j)] (None: no
    interval at that look), chosen so that the chance that any look's interval excludes the
    true median is at most 1 - ``level`` (module docstring: one nominal level at every look,
    the largest that keeps the exact total within it).

    ``looks``: the sample counts at which a decision may be taken (one count: the fixed-n
    sign test). Cost: O(N^2) per nominal level tried, N the last look; cached.

    Examples
    --------
    >>> sign_ranks([12])
    {12: 3}
    >>> sign_ranks(range(6, 13))
    {6: 1, 7: 1, 8: 1, 9: 1, 10: 2, 11: 2, 12: 2}
    >>> sign_ranks([5])
    {5: None}
    """
    if not 0 < level < 1:
        raise ValueError(f"level(={level}) must be in (0, 1)")
    return dict(_ranks(_looks(looks), float(level)))


def sign_error(looks: Iterable[int], level: float = 0.95) -> float:
    """The exact probability that some look of :func:`sign_ranks` (``looks``, ``level``)
    rejects a true median: 1 minus the coverage of its intervals at any stop among ``looks``.

    >>> round(sign_error(range(6, 13)), 5)  # 176 / 4096
    0.04297
    """
    looks = _looks(looks)
    ranks = sign_ranks(looks, level)
    return float(_error(looks, {n: j - 1 for n, j in ranks.items() if j is not None}))
