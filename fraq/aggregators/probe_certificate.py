r"""How far an aggregator's adapter is from the exact weighted aggregate, from k random probes.

The same question as :mod:`fraq.aggregators.certificate` (what is certified per method, the
exact aggregate :math:`S = XY` of the uploads' stack and the certified update :math:`G = UV`
of each downlink), answered at about k / R of FRAQ's own cost instead of about all of it,
with a probability in place of certainty.

Probes. After the result is fixed, k Gaussian vectors :math:`z_j \sim N(0, I_n)` are drawn
from a generator seeded with ``seed`` (both recorded in the certificate), and the error
:math:`E = S - G` is applied to them through the factors, never as an m x n matrix:

.. math::
    E z = X (Y z) - U (V z), \qquad
    T_E = \frac1k \sum_j \|E z_j\|^2, \qquad T_S = \frac1k \sum_j \|S z_j\|^2 .

Why the bound holds for any E. With :math:`E = \sum_i \sigma_i u_i v_i^\top`,
:math:`\|E z\|^2 = \sum_i \sigma_i^2 (v_i^\top z)^2`, so
:math:`Q = T_E / \|E\|_F^2 = \sum_i w_i g_i` with :math:`w_i = \sigma_i^2 / \|E\|_F^2`
summing to 1 and :math:`g_i` independent :math:`\chi^2_k / k` (the Gaussian estimator of
:math:`\mathrm{tr}(E^\top E)`; Roosta-Khorasani and Ascher 2015, doi:10.1007/s10208-014-9220-1).
For t >= 0, :math:`\mathbb{E} e^{-tQ} = \exp(-\tfrac k2 \sum_i f(w_i))` with
:math:`f(w) = \log(1 + 2tw/k)` concave and f(0) = 0, hence subadditive:
:math:`\sum_i f(w_i) \ge f(1)`, and :math:`\mathbb{E} e^{-tQ} \le (1 + 2t/k)^{-k/2}`, the
rank-one case's. For 0 <= t < k/2, :math:`-\log(1 - 2tw/k)` is convex with value 0 at 0,
hence superadditive, and :math:`\mathbb{E} e^{tQ} \le (1 - 2t/k)^{-k/2}`. Chernoff's bound at
its best t then gives, for every E,

.. math::
    P(Q \le x) \le (x e^{1 - x})^{k/2} \ (x < 1), \qquad
    P(Q \ge x) \le (x e^{1 - x})^{k/2} \ (x > 1).

:func:`tail_points` solves :math:`(x e^{1-x})^{k/2} = \delta / 2` on each side of 1 by
bisection: with probability at least :math:`1 - \delta/2` each, :math:`\|E\|_F^2 \le T_E /
x_{lo}` and :math:`\|S\|_F^2 \ge T_S / x_{hi}`, so by the union bound (the two events share
the probes; no independence is needed), with probability at least :math:`1 - \delta`,

.. math::
    \frac{\|S - G\|_F}{\|S\|_F} \le \sqrt{\frac{x_{hi}}{x_{lo}} \frac{T_E}{T_S}} .

At k = 8, delta = 1e-3: x_lo = 0.0583, x_hi = 4.38, a factor sqrt(x_hi / x_lo) = 8.66 over
the estimate. The numerator alone (delta = 1e-3 on one tail) would give
:math:`\|E\|_F \le 3.77 \sqrt{T_E}`. The exact rank-one quantile is tighter (chi2(8)'s 0.001
quantile is 0.857: 3.06 instead of 3.77), but using it for every E needs the claim that a
rank-one E has the heaviest lower tail, which the Chernoff route does not: it proves the
rank-one case's *bound* for all E (``tests/test_probe_certificate.py`` checks the
rank-one quantiles against scipy and other spectra by sampling). Choosing k: the ratio's
factor falls as k grows (8.66 at k = 8, 4.27 at 16, 2.72 at 32, delta = 1e-3) while the cost
grows as k.

Denominator from the same probes. :math:`S z_j` is formed anyway (E z = S z - G z), so
:math:`T_S` is free; the exact :math:`\|S\|_F^2 = \langle X^\top X, Y Y^\top\rangle` would
need the two R x R Grams, 2 (m + n) R^2 flops, the very step of FRAQ's that this certificate
exists not to repeat.

Cost: 2 k (m + n)(R + p) flops per module and distinct downlink (R the stacked rank, p the
update's), against FRAQ's 2 (m + n) R (R + p) for its Grams and output (plus its R^3 terms):
a ratio of at most k / R, 10% at k = 8 for R = 80 (10 clients of rank 8). Drawing the probes
and the norms are O((m + n) k) more. In time it costs more than that ratio: its flops are
float64 ones on skinny (k x n) products, where FRAQ's are float32 ones on R-wide blocks,
and it casts and takes the norms of every stack once more (docs/library.md, "Cost", has
the measured ratio).

Rounding (deterministic, added to the bound). The probes run in ``dtype`` with unit roundoff
u (float64 by default: the arithmetic costs the same flops, and its rounding stays far below
any error worth reporting; float32 halves the memory traffic and is covered as well). A
computed matrix-vector product :math:`\widehat{C w}` errs by at most :math:`\gamma_L |C||w|`,
L the inner length (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
Eq. 3.5), so forming the stacks (weights, scales, casts: at most 8 roundings per rank-one
term), applying :math:`Y` (length n) then :math:`X` (length R), subtracting, and the float64
norms (length m) give, to first order,

.. math::
    \bigl|\,\|\widehat{E z}\| - \|E z\|\,\bigr| \le \rho_E \|z\|,\quad
    \rho_E = 1.01\, c_E u (N_S + N_G),\quad c_E = m + n + R + p + 9,

with :math:`N_S = \sum_i \|x_i\|\|y_i\|` the sum of the stack's rank-one norms
(:func:`fraq._gram.scale_sum`; N_G likewise for G), and :math:`\rho_S = 1.01\, c_S u N_S`,
:math:`c_S = m + n + R + 8`, for :math:`S z`. The 1.01 covers second-order terms while
c u <= 1e-3 (float32: c up to 16,000; a larger module in float32 is refused, float64 covers
any real model). The bound uses :math:`T_E^+ = \frac1k\sum_j (\|\widehat{E z_j}\| + \rho_E
\|z_j\|)^2` and :math:`T_S^- = \frac1k\sum_j \max(\|\widehat{S z_j}\| - \rho_S \|z_j\|, 0)^2`
in place of :math:`T_E`, :math:`T_S`. An update whose every computed :math:`\|\widehat{E
z_j}\|` lies within :math:`\rho_E \|z_j\|` is at the rounding level: exact to what the probes
resolve, and ``bound`` is all that is known. The probes themselves are the dtype's numbers
drawn by torch's generator, taken as Gaussian (their deviation is far below the margins
above); the same seed gives the same probes on the same device type and dtype.

Range. Float64 uploads whose aggregate lies near 1e-150 or 1e150 would make :math:`S z`
and its squared norms under- or overflow (and float32 probes could not hold such factors
at all): the stacks are formed in float64 and brought to unit scale by exact powers of
two, S and G alike (:func:`fraq.aggregators.certificate.unit_scaled`), before the cast to
``dtype``; the ratio is scale-invariant, and only ``exact_norm`` has the scale put back.
Where that cannot happen the scaling is skipped: with float64 probes, uploads (or a round
buffer's stacks) and downlinks of float32, bfloat16 or float16 numbers times weights and
scales within 2^-40..2^40 (:data:`fraq.aggregators.certificate.NARROW`) keep every
product, sum and square in float64's normal range, where a power-of-two scaling would
change no computed ratio. That common case reads the stack as it is held
(:class:`~fraq.aggregators.certificate.StackParts`: the uploads, or a round buffer's
stacks): each side joined and cast to float64 for its module alone (exact; the copy is
still in cache when the product reads it), and the weights :math:`a_k s_k` (and a
downlink term's scale) applied to the (k, R) product :math:`Z^\top Y^\top` rather than
to the stack, so no weighted float64 stack is formed. Besides the two inner products
(lengths n and R), a rank-1 term then takes two roundings of its own (the coefficient's
and its multiply) where c_S and c_E allow 8 for forming the stack; N_S and N_G are the
weighted terms' norms as before. Its computed norms and the scaled route's are each
within the rounding bound of the exact ones, hence within twice it of each other
(``tests/test_probe_certificate.py`` checks that, and both against the float64 dense
error). The same holds for the same numbers held in another layout (a B, or a view of
B^T): a BLAS may sum them in another order, so the certificates agree within that bound,
not bit for bit.

Probes by column count. One (k, n) draw per column count n, in module order, serves
every module of that n: a module's bound is a statement about its own error, fixed
before any probe was drawn, so it holds with probability 1 - delta whatever another
module saw; so does the worst module's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fraq.aggregators.certificate import (
    Certificate,
    ExactAggregate,
    StackParts,
    check_update_shape,
    stored_terms,
    _json_number,
    bound_text,
    distinct_downlinks,
    stored_slack,
    times_pow2,
    unit_scaled,
    unscaled,
    update_factors,
    update_terms,
    upload_aggregate,
)
from fraq._parallel import one_thread
from fraq.aggregators.payload import ClientUpdate

if TYPE_CHECKING:
    from fraq.aggregators.aggregation_result import AggregationResult

__all__ = ["PROBES", "DELTA", "PROBE_DEFAULTS", "ProbeCertificate", "ProbeModuleCertificate", "certify_probe",
           "tail_points"]

PROBES = 8
"""Default number of probes: the smallest k whose cost stays at 10% of FRAQ's at R = 80 while
the bound's factor over the estimate (8.66 at delta = 1e-3) still names the order of magnitude."""
DELTA = 1e-3
"""Default failure probability of the stated bound."""
PROBE_DEFAULTS = {"probes": PROBES, "delta": DELTA, "seed": 0, "dtype": torch.float64}
"""The options of :func:`certify_probe` and their defaults, read by every front door that passes them on."""
_SAFETY = 1.01
_MAX_CU = 1e-3  # c u above which the 1.01 no longer covers the second-order rounding terms
_DTYPES = (torch.float32, torch.float64)


def tail_points(probes: int, delta: float) -> tuple[float, float]:
    r"""(x_lo, x_hi): the points below and above 1 where
    :math:`(x e^{1-x})^{k/2} = \delta / 2`, the Chernoff bound on each tail of
    :math:`T / \|E\|_F^2` for any E (module docstring), k = ``probes``.

    Bisection on :math:`h(x) = \tfrac k2 (1 - x + \log x)`, increasing below 1 and
    decreasing above; the returned ends are those on the safe side (x_lo never above the
    root, x_hi never below). At k = 8, delta = 1e-3: (0.0583, 4.38).

    Examples:
        >>> lo, hi = tail_points(8, 1e-3)
        >>> round(lo, 4), round(hi, 2), round((hi / lo) ** 0.5, 2)
        (0.0583, 4.38, 8.66)
    """
    _check_options(probes, delta, 0)
    k, target = probes, math.log(delta / 2)

    def h(x: float) -> float:
        return 0.5 * k * (1.0 - x + math.log(x))

    lo, hi = math.ulp(0.0), 1.0  # below 1: h(lo) < target <= h(1) = 0
    for _ in range(1100):  # the interval halves each step; 1100 steps reach adjacent floats from [2^-1074, 1]
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if h(mid) > target else (mid, hi)
    x_lo = lo
    lo, hi = 1.0, 2.0
    while h(hi) > target:
        hi *= 2.0
    for _ in range(1100):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if h(mid) > target else (lo, mid)
    return x_lo, hi


@dataclass(frozen=True)
class ProbeModuleCertificate:
    """One module's probe certificate: ``||S - G||_F / ||S||_F <= bound`` with probability at
    least ``1 - delta`` over the probes (module docstring).

    Attributes:
        error: the estimate :math:`\\sqrt{T_E / T_S}` (rounding noise when
            ``at_rounding_level``); an estimate, not a bound.
        bound: the stated bound (``inf`` when the certificate cannot judge: :attr:`note`).
        delta: the probability that ``bound`` is wrong is at most this.
        probes: k, the number of Gaussian probes.
        seed: the generator seed the probes were drawn with.
        resolution: the probes' rounding relative to the estimated ||S||,
            :math:`\\sqrt{\\sum_j \\rho_E^2 \\|z_j\\|^2 / \\sum_j \\|S z_j\\|^2}`.
        at_rounding_level: every computed :math:`\\|E z_j\\|` is within its rounding bound.
        exact_norm: the estimate :math:`\\sqrt{T_S}` of ||S||_F.
        client: the client whose adapter this is when clients receive different ones (the
            worst bound of them), else None.
    """

    error: float
    bound: float
    delta: float
    probes: int
    seed: int
    resolution: float
    at_rounding_level: bool
    exact_norm: float
    client: int | None = None

    @property
    def probability(self) -> float:
        return 1.0 - self.delta

    @property
    def note(self) -> str | None:
        """Why the certificate cannot judge, in words, or None when ``bound`` is finite."""
        if math.isfinite(self.bound):
            return None
        if not math.isfinite(self.exact_norm):
            return "cannot judge: the probes overflowed their dtype (pass dtype=torch.float64)"
        if self.at_rounding_level:
            return "cannot judge: the exact aggregate is zero on every probe (to rounding), and so is the update"
        return "cannot judge: the exact aggregate is zero on every probe (to rounding), but the update is not"

    @property
    def verdict(self) -> str:
        """``<= b with probability 1 - delta`` in words, or why it cannot judge."""
        if self.note is not None:
            return self.note
        return f"<= {bound_text(self.bound, 2)} with probability {self.probability:.6g}"

    def __str__(self) -> str:
        if self.note is not None:
            return self.note
        if self.at_rounding_level:
            return f"{self.verdict} (rounding level)"
        return f"{self.error:.2e} ({self.verdict})"

    def to_json(self) -> dict:
        """Strict JSON: a number that does not exist is null and ``bound_note`` says why;
        ``verdict`` is the bound and its probability in words."""
        num = _json_number
        return {"error": num(self.error), "bound": num(self.bound), "bound_note": self.note,
                "verdict": self.verdict, "probability": self.probability, "delta": self.delta,
                "probes": self.probes, "seed": self.seed, "resolution": num(self.resolution),
                "at_rounding_level": self.at_rounding_level, "exact_norm": num(self.exact_norm),
                "client": self.client}


class ProbeCertificate(Certificate):
    """module name -> :class:`ProbeModuleCertificate`, with the probes' k, delta and seed."""

    def __init__(self, modules: Mapping[str, ProbeModuleCertificate], *, probes: int, delta: float, seed: int):
        super().__init__(modules)
        self.probes, self.delta, self.seed = probes, delta, seed

    def summary(self) -> dict:
        """:meth:`Certificate.summary`'s fields (``certificate_error`` the worst module's
        estimate) and ``certificate_verdict`` (its bound with the probability, in words),
        ``certificate_probability``, ``certificate_probes``, ``certificate_seed``."""
        name, c = self.worst
        return {**super().summary(), "certificate_verdict": c.verdict, "certificate_probability": c.probability,
                "certificate_probes": self.probes, "certificate_seed": self.seed}

    def __repr__(self) -> str:
        name, c = self.worst
        return f"ProbeCertificate({len(self)} modules, {self.probes} probes, seed {self.seed}, worst {name!r}: {c})"


def certify_probe(updates: Sequence[ClientUpdate], result: AggregationResult, *, probes: int = PROBES,
                  delta: float = DELTA, seed: int = 0, dtype: torch.dtype = torch.float64) -> ProbeCertificate:
    """Certify ``result`` against the exact weighted aggregate of ``updates`` with ``probes``
    Gaussian probes: per module, ``||S - G||_F / ||S||_F <= bound`` with probability at least
    ``1 - delta`` (module docstring: the bound, its constant, the rounding, the cost).

    Args:
        updates: the round's uploads, exactly as passed to ``aggregate``.
        result: that round's :class:`AggregationResult`; the probes are drawn after it.
        probes: k >= 2, the number of probes (each costs 2 (m + n)(R + p) flops per module).
        delta: in (0, 1), the probability the bound may fail (split evenly between the
            error's and the aggregate's estimates).
        seed: the probes' generator seed (>= 0), recorded in the certificate.
        dtype: float64 (default) or float32, the probes' arithmetic.

    Returns:
        :class:`ProbeCertificate`, read to the host once.

    Raises:
        TypeError, ValueError: the options out of range (named with their value), uploads
            that do not validate or differ from the result's, a downlink of the wrong shape,
            or a float32 module too large for the rounding bound.

    Examples:
        >>> import torch
        >>> from fraq.aggregators import ClientUpdate, get_aggregator
        >>> g = torch.Generator().manual_seed(0)
        >>> ups = [ClientUpdate({"q": (torch.randn(16, 4, generator=g), torch.randn(4, 12, generator=g))},
        ...                     scale=2.0, weight=w) for w in (3, 1)]
        >>> cert = certify_probe(ups, get_aggregator("fraq", tau=1.0).aggregate(ups))
        >>> cert["q"].bound < 1e-5, cert["q"].verdict.endswith("with probability 0.999")
        (True, True)
        >>> certify_probe(ups, get_aggregator("fedit").aggregate(ups))["q"].error > 0.1
        True
    """
    check_probe_options(probes, delta, seed, dtype)
    return certify_probe_exact(upload_aggregate(updates, result), result, probes=probes, delta=delta, seed=seed,
                               dtype=dtype)


def check_probe_options(probes: object, delta: object, seed: object, dtype: object) -> None:
    """Refuse options out of range, naming the option and its value (before any work)."""
    _check_options(probes, delta, seed)
    if dtype not in _DTYPES:
        raise TypeError(f"dtype(={dtype!r}) must be torch.float32 or torch.float64")


def certify_probe_exact(exact: ExactAggregate, result: AggregationResult, *, probes: int, delta: float, seed: int,
                        dtype: torch.dtype) -> ProbeCertificate:
    """:func:`certify_probe` against ``exact``, the round's exact aggregate however it is held
    (:func:`fraq.aggregators.certificate.certify_exact`), options checked
    (:func:`check_probe_options`). A stored stack's rounding w (the Gram certificate's
    "Stored stacks") adds w ||z_j|| to each probe's rounding: ||(S - X'Y') z|| <= w ||z||.

    The modules of one column count n share their k probes (drawn in module order, one
    (k, n) draw per n): each module's bound is a statement about its own error, which was
    fixed before any probe was drawn, so it holds with probability 1 - delta whether or not
    another module saw the same probes; so does the worst module's (its true error is the
    largest whatever the probes)."""
    x_lo, x_hi = tail_points(probes, delta)
    u = torch.finfo(dtype).eps / 2
    gen = torch.Generator(device=exact.device).manual_seed(seed)
    drawn: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def probes_of(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        if n not in drawn:
            Zt = torch.randn(probes, n, generator=gen, dtype=dtype, device=exact.device)
            drawn[n] = Zt, torch.linalg.vector_norm(Zt.double(), dim=1)
        return drawn[n]

    rows, where, made = [], [], {}
    # On the CPU, one module after another on one thread: each op is too small to repay a thread
    # team (at two threads a team made the call slower), and sharing the modules between Python
    # threads lost more to the GIL than it gained (measured 1.2x slower at two threads).
    with one_thread() if exact.device.type == "cpu" else contextlib.nullcontext():
        for name in exact.names:
            downs = list(distinct_downlinks(result, name))
            if exact.parts is not None and _unscaled(exact, downs, dtype):
                parts = exact.parts(name)
                module_rows = _parted_rows(parts, downs, name, probes_of(parts.y[0].shape[1]), made)
            else:
                module_rows = _module_rows(exact, name, downs, dtype, probes_of)
            for k, count, row, (m, n, R, p), stored in module_rows:
                if (m + n + R + p + 9) * u > _MAX_CU:  # float32 probes only: float64's c would need to pass 1e12
                    raise ValueError(f"dtype(={dtype}) rounds too coarsely for module {name!r}: "
                                     f"c u = {(m + n + R + p + 9) * u:.1e} > {_MAX_CU:g}; pass dtype=torch.float64")
                rows.append(row)
                where.append((name, k, count, (m, n, R, p), stored))
    values = torch.stack(rows).tolist()  # the one host read
    shared = {name: count for name, _, count, _, _ in where}
    modules: dict[str, ProbeModuleCertificate] = {}
    for (name, k, _, (m, n, R, p), stored), row in zip(where, values):
        c = _module(row, (m + n + R + 8, m + n + R + p + 9), stored, probes, u, x_lo, x_hi, delta=delta, seed=seed,
                    client=None if shared[name] == 1 else k)
        if name not in modules or c.bound > modules[name].bound:
            modules[name] = c
    return ProbeCertificate(modules, probes=probes, delta=delta, seed=seed)


def _module_rows(exact: ExactAggregate, name: str, downs: list, dtype: torch.dtype, probes_of):
    """(client, distinct count, row, (m, n, R, p), stored) per distinct downlink of module
    ``name``, from its weighted float64 factors (:meth:`ExactAggregate.factors`), brought to
    unit scale first unless nothing can under- or overflow (module docstring, "Range"), then
    cast to ``dtype``. The row: ||S z_j|| (k), ||E z_j|| (k), ||z_j|| (k), N_S, N_G, the
    scale's exponent, the stored stack's T."""
    f = exact.factors(name)
    if _unscaled(exact, downs, dtype):
        X, Y, ks = f.X.to(dtype), f.Y.to(dtype), None
        scale = f.X.new_zeros(1)
    else:
        X64, Y64, ks = unit_scaled(f.X, f.Y)
        X, Y = X64.to(dtype), Y64.to(dtype)
        scale = (ks[0] + ks[1]).to(torch.float64).reshape(1)
    m, R, n = X.shape[0], X.shape[1], Y.shape[1]
    Zt, z_norms = probes_of(n)
    SZ = (Zt @ Y.mT) @ X.mT  # (k, m): row j is (S z_j)^T
    NS = _norm_sum(X, Y)
    s_norms = torch.linalg.vector_norm(SZ.double(), dim=1)
    slack = f.slack_terms()
    for k, down, count in downs:
        U, V = update_factors(down, name, k, exact.single, f.X, f.Y)
        if ks is not None:
            U, V, _ = unit_scaled(U, V, ks)
        U, V = U.to(dtype), V.to(dtype)
        EZ = SZ - (Zt @ V.mT) @ U.mT
        e_norms = torch.linalg.vector_norm(EZ.double(), dim=1)
        row = torch.cat([s_norms, e_norms, z_norms, NS.reshape(1), _norm_sum(U, V).reshape(1), scale, slack])
        yield k, count, row, (m, n, R, U.shape[1]), f.stored


def _parted_rows(parts: StackParts, downs: list, name: str, drawn: tuple[torch.Tensor, torch.Tensor], made: dict):
    """:func:`_module_rows` for float64 probes on NARROW numbers, from the stack's parts as
    they are held (:class:`fraq.aggregators.certificate.StackParts`): each side joined into
    one float64 copy (a cast, exact, of the module alone, so it stays in cache for the product
    that reads it), the coefficients applied to the (k, R) product :math:`Z^\top Y^\top`,
    never to the stack. Every rank-1 term's computed contribution then takes at most n + R
    + 2 roundings before the subtraction (the length-n and length-R inner products, the
    coefficient's own rounding and its multiply), within the module docstring's c_S and c_E,
    which allow 8 for forming the stack; N_S and N_G are the weighted terms' norms as before."""
    Xt, Y = _joined(parts.xt), _joined(parts.y)
    R, m, n = Xt.shape[0], Xt.shape[1], Y.shape[1]
    Zt, z_norms = drawn
    nx, ny = _row_norms(Xt), _row_norms(Y)
    P, terms = Zt @ Y.mT, nx * ny
    if parts.coefficients is not None:
        c = _per_row(parts.coefficients, [y.shape[0] for y in parts.y], Y, made)
        P, terms = P * c, terms * c.abs()
    SZ = P @ Xt
    s_norms = torch.linalg.vector_norm(SZ, dim=1)
    NS, zero = terms.sum().reshape(1), Y.new_zeros(1)
    slack = zero if parts.stored is None else stored_terms(nx, ny, m, n)
    for k, down, count in downs:
        terms_g = update_terms(down, name, k, False)
        if terms_g:
            Ut, V = _joined([f.B.mT for f in terms_g]), _joined([f.A for f in terms_g])
            check_update_shape(Ut.shape[1], V.shape[1], m, n, name, k)
            cg = _per_row([f.scale for f in terms_g], [f.A.shape[0] for f in terms_g], Y, made)
            EZ = SZ - ((Zt @ V.mT) * cg) @ Ut
            NG = (_row_norms(Ut) * _row_norms(V) * cg.abs()).sum()
            p = Ut.shape[0]
        else:  # no update: G = 0
            EZ, NG, p = SZ, zero, 0
        e_norms = torch.linalg.vector_norm(EZ, dim=1)
        row = torch.cat([s_norms, e_norms, z_norms, NS, NG.reshape(1), zero, slack])
        yield k, count, row, (m, n, R, p), parts.stored


def _joined(blocks: tuple[torch.Tensor, ...] | list[torch.Tensor]) -> torch.Tensor:
    """The blocks (r_j, L) stacked into one (sum r_j, L) float64 tensor, each entry cast
    exactly: joined in their own dtype, then cast (two passes over the module, cheaper than
    a cast into place). Blocks that are transposed views (a B^T) are joined as their
    contiguous transposes and the result returned as a transposed view."""
    if len(blocks) == 1:  # the cast keeps the layout
        return blocks[0].to(torch.float64, copy=True)
    if not blocks[0].is_contiguous() and blocks[0].mT.is_contiguous():
        return torch.cat([b.mT for b in blocks], dim=1).to(torch.float64).mT
    return torch.cat(list(blocks)).to(torch.float64)


def _row_norms(T: torch.Tensor) -> torch.Tensor:
    """The 2-norms of T's rows in T's dtype (float64: NARROW numbers neither under- nor
    overflow when squared), reduced along the contiguous dimension either way."""
    if T.is_contiguous():
        return torch.linalg.vector_norm(T, dim=1)
    return (T * T).sum(1).sqrt()


def _per_row(coefficients, rows: list[int], like: torch.Tensor, made: dict) -> torch.Tensor:
    """The coefficients, block j's repeated rows[j] times, as one float64 vector on
    ``like``'s device, made there from host floats (no host data is copied: no host read,
    where :func:`fraq._stack._column_factors`, the stacks' same vector, copies a host list),
    once per distinct (coefficients, rows) in ``made`` (modules of the same client ranks
    and scales share it)."""
    key = (tuple(coefficients), tuple(rows))
    if key not in made:
        made[key] = torch.cat([like.new_full((r,), c, dtype=torch.float64) for c, r in zip(*key)])
    return made[key]


def _unscaled(exact: ExactAggregate, downs: list, dtype: torch.dtype) -> bool:
    """Whether a module's probes run on its factors as they are, without the powers of two
    of :func:`fraq.aggregators.certificate.unit_scaled`: float64 probes, the exact aggregate
    and every distinct downlink made of :data:`~fraq.aggregators.certificate.NARROW` numbers.
    Scaling by powers of two is exact where nothing under- or overflows, and there it would
    change no computed ratio, only the powers of two it takes out (the module docstring's
    "Range")."""
    return dtype == torch.float64 and unscaled(exact, downs)


def _check_options(probes, delta, seed) -> None:
    if isinstance(probes, bool) or not isinstance(probes, int):
        raise TypeError(f"probes(={probes!r}) must be an int")
    if probes < 2:
        raise ValueError(f"probes(={probes}) must be at least 2")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise TypeError(f"delta(={delta!r}) must be a float")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta(={delta}) must be in (0, 1)")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed(={seed!r}) must be an int")
    if seed < 0:
        raise ValueError(f"seed(={seed}) must be >= 0")


def _norm_sum(C: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """N = sum_i ||c_i|| ||w_i|| over C's columns and W's rows, in float64 (a 0-d tensor)."""
    return (torch.linalg.vector_norm(C.double(), dim=0) * torch.linalg.vector_norm(W.double(), dim=1)).sum()


def _module(row: list[float], sizes: tuple[int, int], stored: torch.dtype | None, k: int, u: float, x_lo: float,
            x_hi: float, *, delta: float, seed: int, client: int | None) -> ProbeModuleCertificate:
    """The bound of the module docstring from one row of host numbers (the stacks scaled by
    2^-scale: ``exact_norm`` alone has it put back), with a stored stack's w."""
    s, e, z = row[:k], row[k:2 * k], row[2 * k:3 * k]
    NS, NG, scale, T = row[3 * k:]
    c_s, c_e = sizes
    finite = all(math.isfinite(v) for v in row)
    w = stored_slack(stored, NS, T, int(scale)) if finite else math.inf
    rho_s = _SAFETY * c_s * u * NS + w
    rho_e = _SAFETY * c_e * u * (NS + NG) + w
    t_s = sum(v * v for v in s) / k
    t_e = sum(v * v for v in e) / k
    t_e_hi = sum((ej + rho_e * zj) ** 2 for ej, zj in zip(e, z)) / k
    t_s_lo = sum(max(sj - rho_s * zj, 0.0) ** 2 for sj, zj in zip(s, z)) / k
    at_rounding = all(ej <= rho_e * zj for ej, zj in zip(e, z))
    rounding = sum((rho_e * zj) ** 2 for zj in z) / k
    inf = math.inf
    if not finite:
        return ProbeModuleCertificate(error=inf, bound=inf, delta=delta, probes=k, seed=seed, resolution=inf,
                                      at_rounding_level=False, exact_norm=inf, client=client)
    error = math.sqrt(t_e / t_s) if t_s > 0 else (0.0 if at_rounding else inf)
    bound = math.sqrt(x_hi / x_lo * t_e_hi / t_s_lo) if t_s_lo > 0 else inf
    resolution = math.sqrt(rounding / t_s) if t_s > 0 else inf
    return ProbeModuleCertificate(error=error, bound=bound, delta=delta, probes=k, seed=seed, resolution=resolution,
                                  at_rounding_level=at_rounding, exact_norm=times_pow2(math.sqrt(t_s), int(scale)),
                                  client=client)
