r"""How far an aggregator's adapter is from the exact weighted aggregate, with a rounding bound.

Per module, the exact aggregate of a round's uploads is the weighted stack of
:func:`fraq.stack` (the paper's Eq. 7), with the weights a_k = n_k / sum_j n_j and the
scales s_k of the uploads themselves:

.. math::
    S = \sum_k a_k s_k B_k A_k = X Y,\qquad
    X = [\sqrt{a_1} B_1, \dots] \ (m \times R),\quad
    Y = [\sqrt{a_1} s_1 A_1; \dots] \ (R \times n),\quad R = \sum_k r_k .

What is certified of a method is what a client's weights change by: every term of its
:class:`~fraq.aggregators.payload.Downlink`, the products it merges into its base weights
plus the adapter it warm-starts from (:meth:`Downlink.delta`, here kept factored),
:math:`G = U V` with U (m, p) and V (p, n) the terms' ``scale * B`` and ``A`` side by side.
For the methods in this package that is: FRAQ and FLoRA, the merged global adapter;
FedIT, FLoRIST, LoRA-A^2, the warm-start adapter; FedEx-LoRA, the merged residual plus
the warm-start adapter (the whole update a client applies, so the certificate says how
exact the residual makes it); FlexLoRA, each client's own truncation, and a module's
certificate is the worst over its clients (``client`` names which). FLoRG's update
:math:`s L A^\top A R` has fixed semi-orthogonal L, R, so its Frobenius norms are those of
the min(m, n) square core :math:`\sum_k a_k s_k A_k^\top A_k` against :math:`s A_g^\top A_g`,
which is what is certified (X = Y^T with rows :math:`\sqrt{a_k s_k} A_k`).
LoRA-A^2 with component budgets (``upload_rank``) is certified against the uploads as
given, so what a budget leaves out counts as error.

The relative error is computed from small Grams in float64, never the m x n matrix:

.. math::
    \|S - G\|_F^2 = \langle X^\top X, Y Y^\top\rangle - 2 \langle U^\top X, V Y^\top\rangle
                    + \langle U^\top U, V V^\top\rangle,

at (m + n)(R^2 + R p + p^2) multiply-adds per module (about FRAQ's own recompression count,
in float64). It reads only the uploads and the downlink factors, so it is independent
of how the method decomposed anything: a transposed, mis-scaled or client-dropping adapter
shows as an O(1) error.

Rounding bound. With u = 2^-53, a float64 dot product of length L is off by at most
gamma_L |x|^T |y| <= L u ||x|| ||y|| (first order; Higham, "Accuracy and Stability of
Numerical Algorithms", 2nd ed., Eq. 3.5), for any summation order, FMA or not. So each Gram
entry (X^T X)_ij is off by at most m u ||x_i|| ||x_j|| (x_i a column of X), each (Y Y^T)_ij by
n u ||y_i|| ||y_j||, and the inner product of two q x q Grams adds q^2 u times the sum of its
terms' magnitudes. Summed over entries, every bound collapses to
:math:`N_S^2 = (\sum_i \|x_i\| \|y_i\|)^2`, the squared sum of the norms of the stack's rank-1
terms (N_G likewise for G; N_S >= ||S||_F, equal for one rank-1 term, larger when clients
cancel). Forming X, Y from the sqrt(a_k), s_k in float64 and the two subtractions add 8 u.
Hence, with c = m + n + max(R, p)^2 + 8,

.. math::
    |\widehat{\|S - G\|^2} - \|S - G\|^2| \le \delta = 1.01\, c\, u\, (N_S + N_G)^2,
    \qquad |\widehat{\|S\|^2} - \|S\|^2| \le \delta_S = 1.01\, c\, u\, N_S^2,

the 1.01 covering second-order terms while c u < 10^-3 (any real model: c would need to
pass 10^12). The certificate then states ``error <= bound`` with
``bound = sqrt(d2 + delta) / sqrt(ss - delta_S)``, a guaranteed upper bound on the true
relative error. The subtraction cancels: below ``resolution = sqrt(delta) / ||S||``
(relative to ||S||, about sqrt(c u) N/||S||, 1e-7 to 1e-6 at RoBERTa sizes) the computed
difference is rounding, and the certificate says ``at_rounding_level`` rather than print
that noise. An exact method in float32 (FRAQ at full rank: errors near 1e-7) is
certified at the rounding level; FedIT's averaging and any rank cut show their error.

Stored stacks. A :class:`~fraq.aggregators.RoundBuffer` holds no upload, only the weighted
stacks it handed the method: :math:`X' = [\sqrt{a_k} B_k]`, :math:`Y' = [\sqrt{a_k} s_k A_k]`
rounded into the buffer's dtype (unit roundoff u_d, smallest subnormal eta_d), and certifies
against them (:class:`ExactFactors` with ``stored`` set). Each stored entry is the exact one
times (1 + theta) plus an absolute eta, |theta| <= 4 u_d (the float64 sqrt(a_k) s_k, its
cast and the multiply; float32 in between for half precision) and |eta| <= eta_d (a
subnormal result), so per rank-1 term
:math:`\|x'_i y_i'^\top - x_i y_i^\top\|_F \le 8 u_d \|x'_i\| \|y'_i\| + \eta_d
(\sqrt m \|y'_i\| + \sqrt n \|x'_i\|)` to first order, and summed,

.. math::
    \|S - X'Y'\|_F \le w = 1.01\,\bigl(8 u_d N_{S'} + \eta_d
        \textstyle\sum_i (\sqrt m \|y'_i\| + \sqrt n \|x'_i\|)\bigr)

(w = 0 for factors formed here). The Grams are those of :math:`S' = X'Y'`, so
``bound = (sqrt(d2 + delta) + w) / (sqrt(ss - delta_S) - w)`` still bounds the true
relative error against S, ``resolution`` is (sqrt(delta) + w) / ||S'||, and
``at_rounding_level`` reads sqrt(d2) <= sqrt(delta) + w. The computed error then differs
from the uploads' certificate by at most about the two resolutions (1 + error): in float32,
w / ||S|| is about 5e-7 N_S / ||S||, what the method's own float32 stacks already lose.

Range. A Gram squares its factors' scale, so float64 uploads whose aggregate lies near
1e-150 or 1e150 (inside what :func:`fraq.recompress` handles) would under- or overflow in
them. Each pair is therefore brought to unit scale first (:func:`unit_scaled`): X's columns
balanced against Y's rows, U's against V's (each product unchanged), then X and U scaled
by one power of two 2^-k_X, Y and V by 2^-k_Y, chosen so the balanced X and Y have
their largest entries near 1. Powers of two are exact, S and G are scaled alike, and the
relative error is scale-invariant: only ``exact_norm`` has 2^(k_X + k_Y) put back.
Gradual underflow of what is left (terms 2^-1000 below the largest) adds at most
2^-1074 per multiplication, counted in delta as c^3 2^-1074.
Uploads (or a round buffer's stacks) and downlinks of float32, bfloat16 or float16 numbers
times weights and scales within 2^-40..2^40 (:data:`NARROW`) skip it: their Grams stay in
float64's normal range (entries within 2^-378..2^356 in magnitude, products of two within
2^-756..2^752, sums of up to 2^40 of those), where the scaling is exact and changes no
computed ratio.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

import torch

from fraq._range import balance, exponent, scale_pow2
from fraq._stack import normalized_weights
from fraq.aggregators.payload import ClientUpdate, Downlink, Factors
from fraq.aggregators.validation import validate_updates

if TYPE_CHECKING:
    from fraq.aggregators.aggregation_result import AggregationResult

__all__ = ["Certificate", "ModuleCertificate", "certify"]

_U = 2.0 ** -53
_ETA = 2.0 ** -1074  # the smallest subnormal float64: gradual underflow's absolute error per multiplication
_SAFETY = 1.01


@dataclass(frozen=True)
class ModuleCertificate:
    """One module's certificate: relative Frobenius distance of the certified update G to
    the exact aggregate S, ``||S - G||_F / ||S||_F``.

    Attributes:
        error: the computed relative error (rounding noise when ``at_rounding_level``).
        bound: a guaranteed upper bound on the true relative error (``inf`` when the exact
            aggregate is zero to rounding, so no relative error exists, or when a factor
            holds a non-finite value, ``error`` then nan: the certificate cannot judge, and
            says so in words, :attr:`note`).
        resolution: the relative error the computation cannot resolve, sqrt(delta) / ||S||.
        at_rounding_level: True when the computed squared distance is within its rounding
            bound delta: the adapter is exact up to rounding, and ``bound`` is all that is
            known.
        exact_norm: ||S||_F, the exact aggregate's Frobenius norm.
        client: the client whose adapter this is when clients receive different ones
            (the worst of them), else None.
    """

    error: float
    bound: float
    resolution: float
    at_rounding_level: bool
    exact_norm: float
    client: int | None = None

    @property
    def note(self) -> str | None:
        """Why the certificate cannot judge the adapter, in words, or None when it can (a
        finite bound). Untrained adapters (every ``lora_B`` zero, as peft initialises them)
        and clients that cancel exactly have a zero aggregate, against which no relative
        error exists."""
        if math.isfinite(self.bound):
            return None
        if math.isnan(self.error):
            return "cannot judge: the update or the exact aggregate's stacks hold a non-finite value (overflow)"
        if self.at_rounding_level:
            return "cannot judge: the exact aggregate is zero (to rounding), and so is the update"
        return "cannot judge: the exact aggregate is zero (to rounding), but the update is not"

    def __str__(self) -> str:
        if self.note is not None:
            return self.note
        if self.at_rounding_level:
            return f"<= {bound_text(self.bound, 1)} (rounding level)"
        return f"{self.error:.2e} (<= {bound_text(self.bound, 2)})"

    def to_json(self) -> dict:
        """Strict JSON: a number that does not exist (the relative error, bound and resolution
        against a zero aggregate) is null, and ``bound_note`` says why (null when judged)."""
        num = _json_number
        return {"error": num(self.error), "bound": num(self.bound), "bound_note": self.note,
                "resolution": num(self.resolution), "at_rounding_level": self.at_rounding_level,
                "exact_norm": self.exact_norm, "client": self.client}


def bound_text(x: float, digits: int) -> str:
    """A bound in e-notation with ``digits`` digits after the point, rounded up (never
    printed below the bound, as plain ``:.2e`` rounding to nearest may be)."""
    text = f"{x:.{digits}e}"
    if not math.isfinite(x) or float(text) >= x:
        return text
    mant, exp = text.split("e")
    return f"{float(f'{Decimal(mant) + Decimal(1).scaleb(-digits)}e{exp}'):.{digits}e}"


def _json_number(x: float) -> float | None:
    return x if math.isfinite(x) else None


class Certificate(Mapping[str, ModuleCertificate]):
    """module name -> :class:`ModuleCertificate`, in upload order, and the worst of them."""

    def __init__(self, modules: Mapping[str, ModuleCertificate]):
        if not modules:
            raise ValueError("a certificate needs at least one module")
        self._modules = dict(modules)

    def __getitem__(self, name: str) -> ModuleCertificate:
        return self._modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    @property
    def worst(self) -> tuple[str, ModuleCertificate]:
        """(module, certificate) with the largest ``bound`` (the first such module on ties)."""
        return max(self._modules.items(), key=lambda kv: kv[1].bound)

    def summary(self) -> dict:
        """The worst module as flat JSON fields, what a result record keeps per round:
        ``certificate_error``, ``certificate_bound``, ``certificate_rounding_level``,
        ``certificate_module``, and ``certificate_note``: strict JSON, so against a zero
        aggregate the error and bound are null and the note says in words that the
        certificate cannot judge (null when it can)."""
        name, c = self.worst
        return {"certificate_error": _json_number(c.error), "certificate_bound": _json_number(c.bound),
                "certificate_rounding_level": c.at_rounding_level, "certificate_module": name,
                "certificate_note": c.note}

    def __repr__(self) -> str:
        name, c = self.worst
        return f"Certificate({len(self)} modules, worst {name!r}: {c})"


def certify(updates: Sequence[ClientUpdate], result: AggregationResult) -> Certificate:
    """Certify ``result`` against the exact weighted aggregate of ``updates`` (the module
    docstring: what is certified per method, the bound, the cost).

    Args:
        updates: the round's uploads, exactly as passed to ``aggregate`` (the weights,
            scales and factors the exact aggregate is formed from).
        result: that round's :class:`AggregationResult`.

    Returns:
        :class:`Certificate`. All of it is computed on the uploads' device in float64 and
        read to the host once.

    Raises:
        TypeError, ValueError: uploads that do not validate, modules that differ from the
            result's, or a downlink whose factors do not multiply out to the module's shape.

    Examples:
        >>> import torch
        >>> from fraq.aggregators import ClientUpdate, get_aggregator
        >>> g = torch.Generator().manual_seed(0)
        >>> ups = [ClientUpdate({"q": (torch.randn(16, 4, generator=g), torch.randn(4, 12, generator=g))},
        ...                     scale=2.0, weight=w) for w in (3, 1)]
        >>> cert = get_aggregator("fraq", tau=1.0).aggregate(ups).certificate(ups)
        >>> cert["q"].at_rounding_level
        True
        >>> cert = get_aggregator("fedit").aggregate(ups).certificate(ups)
        >>> cert["q"].error > 0.1
        True
    """
    return certify_exact(upload_aggregate(updates, result), result)


def certify_exact(exact: ExactAggregate, result: AggregationResult) -> Certificate:
    """:func:`certify` against ``exact``, the round's exact aggregate however it is held (the
    uploads, :func:`upload_aggregate`, or a round buffer's stacks,
    :meth:`RoundBuffer.exact_aggregate <fraq.aggregators.RoundBuffer.exact_aggregate>`),
    already checked against ``result`` (:meth:`ExactAggregate.check`)."""
    rows, where = [], []
    for name in exact.names:
        f = exact.factors(name)
        downs = list(distinct_downlinks(result, name))
        plain = unscaled(exact, downs)
        if plain:  # nothing can under- or overflow: the scaling would change nothing
            zero = torch.zeros((), dtype=torch.int64, device=f.X.device)
            X, Y, ks = f.X, f.Y, (zero, zero)
        else:
            X, Y, ks = unit_scaled(f.X, f.Y)
        terms = _exact_terms(X, Y)  # once per module, whatever the number of distinct downlinks
        slack = f.slack_terms()
        for k, down, n in downs:
            U, V = update_factors(down, name, k, exact.single, f.X, f.Y)
            if not plain:
                U, V, _ = unit_scaled(U, V, ks)
            rows.append(torch.cat([_terms(terms, X, Y, U, V, ks), slack]))
            where.append((name, k, n, f.stored))
    values = torch.stack(rows).tolist()  # the one host read
    shared = {name: n for name, _, n, _ in where}
    modules: dict[str, ModuleCertificate] = {}
    for (name, k, _, stored), row in zip(where, values):
        c = _certificate(*row, stored=stored, client=None if shared[name] == 1 else k)
        if name not in modules or c.bound > modules[name].bound:
            modules[name] = c
    return Certificate(modules)


@dataclass(frozen=True)
class ExactFactors:
    """One module's exact aggregate S = X Y as a certificate reads it: X (m, R) and Y (R, n)
    in float64 (FLoRG's X = Y^T), and ``stored``: None when they were formed in float64 from
    the uploads (their rounding is in the bound's 8 u), else the dtype a round buffer's
    weighted stacks were rounded into, whose rounding w (module docstring, "Stored stacks")
    the bound adds."""

    X: torch.Tensor
    Y: torch.Tensor
    stored: torch.dtype | None = None

    def slack_terms(self) -> torch.Tensor:
        """[T], T = sum_i (sqrt(m) ||y_i|| + sqrt(n) ||x_i||) over the stack's rank-1 terms
        (float64, on the device; 0 when ``stored`` is None): w's absolute part over eta_d."""
        if self.stored is None:
            return self.X.new_zeros(1)
        return stored_terms(torch.linalg.vector_norm(self.X, dim=0), torch.linalg.vector_norm(self.Y, dim=1),
                            self.X.shape[0], self.Y.shape[1])


def stored_terms(x_norms: torch.Tensor, y_norms: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """[T], T = sum_i (sqrt(m) ||y_i|| + sqrt(n) ||x_i||) from a stored stack's column norms
    ||x_i|| (X is m x R) and row norms ||y_i|| (Y is R x n): the absolute part of its
    rounding w over eta_d (module docstring, "Stored stacks")."""
    return (math.sqrt(m) * y_norms.sum() + math.sqrt(n) * x_norms.sum()).reshape(1)


@dataclass(frozen=True)
class StackParts:
    """One module's exact aggregate as it is held, unweighted: :math:`S = \\sum_j c_j X_j Y_j`
    over blocks j (a client's upload, or a round buffer's whole stack), ``xt[j]`` :math:`X_j^\\top`
    (r_j, m) and ``y[j]`` :math:`Y_j` (r_j, n) in the dtype they were uploaded or stored in,
    ``coefficients[j]`` :math:`c_j = a_k s_k` (a host float64, one rounding of the exact
    product) or None when the blocks are weighted already (a round buffer's stacks), and
    ``stored`` as :attr:`ExactFactors.stored`. What a certificate that applies the
    coefficients to small products instead of to the stacks reads
    (:mod:`fraq.aggregators.probe_certificate`, "Cost"): no weighted float64 copy of the
    stack is made."""

    xt: tuple[torch.Tensor, ...]
    y: tuple[torch.Tensor, ...]
    coefficients: tuple[float, ...] | None = None
    stored: torch.dtype | None = None


@dataclass(frozen=True)
class ExactAggregate:
    """A round's exact aggregate, module by module: ``names`` (in upload order), ``clients``
    (K), ``single`` (single-matrix uploads), ``device``, and ``factors(name)``, the module's
    :class:`ExactFactors`, made when asked, so one module's float64 copies are alive at a
    time. ``where`` names what holds it in messages (``"updates"``, ``"the round buffer"``).
    ``narrow``: every entry of every module's factors is a number of a dtype no wider than
    float32 times a coefficient within 2^-40..2^40 (:func:`narrow_coefficients`), so their
    float64 products cannot under- or overflow (:data:`NARROW`). ``parts``: when given
    (two-factor uploads and stacks), ``parts(name)`` is the module's :class:`StackParts`,
    the same aggregate unweighted."""

    names: tuple[str, ...]
    clients: int
    single: bool
    device: torch.device
    factors: Callable[[str], ExactFactors]
    where: str = "updates"
    narrow: bool = False
    parts: Callable[[str], StackParts] | None = None

    def check(self, result: object) -> ExactAggregate:
        """Itself, once ``result`` is an :class:`AggregationResult` of the same clients and
        modules (in order); else a TypeError or ValueError naming both."""
        check_result(result)
        if self.clients != result.clients:
            raise ValueError(f"{self.where} has {self.clients} clients, the result {result.clients}")
        if list(self.names) != list(result.modules):
            raise ValueError(f"the modules of {self.where}, {list(self.names)}, differ from the result's "
                             f"{list(result.modules)}")
        return self


def upload_aggregate(updates: Sequence[ClientUpdate], result: AggregationResult | None = None) -> ExactAggregate:
    """The exact aggregate of ``updates`` (validated as ``aggregate`` validates them, values
    aside), checked against ``result`` when one is given (:meth:`ExactAggregate.check`)."""
    if result is not None:
        check_result(result)
    if isinstance(updates, ClientUpdate) or not isinstance(updates, Sequence):
        raise TypeError(f"updates must be a sequence of ClientUpdate, got {type(updates).__name__}")
    single = bool(updates) and isinstance(updates[0], ClientUpdate) and isinstance(updates[0].factors, Mapping) \
        and any(isinstance(p, (tuple, list)) and len(p) == 2 and p[0] is None for p in updates[0].factors.values())
    updates, specs = validate_updates(updates, single_matrix=single, check_values=False)
    a = normalized_weights([u.weight for u in updates], len(updates))
    scales = {spec.name: spec.scales for spec in specs}
    device = next(iter(updates[0].factors.values()))[1].device
    dtypes = {t.dtype for u in updates for pair in u.factors.values() for t in pair if t is not None}
    narrow = dtypes <= set(NARROW) and narrow_coefficients(
        [c for sc in scales.values() for side in _coefficients(a, sc, single) if side for c in side])
    exact = ExactAggregate(tuple(scales), len(updates), single, device,
                           lambda name: ExactFactors(*exact_factors(updates, name, a, scales[name], single)),
                           narrow=narrow, parts=None if single else lambda name: upload_parts(updates, name, a,
                                                                                             scales[name]))
    return exact if result is None else exact.check(result)


def check_result(result: object) -> None:
    """Refuse what is not an :class:`AggregationResult`: read by what it holds, not by its
    class, as this module is below the result's (whose method calls it)."""
    downlinks, method = getattr(result, "downlinks", None), getattr(result, "method", None)
    if not isinstance(downlinks, tuple) or not isinstance(method, str):
        raise TypeError(f"result must be an AggregationResult, got {type(result).__name__}")


def distinct_downlinks(result: AggregationResult, name: str) -> Iterator[tuple[int, Downlink, int]]:
    """(client, downlink, distinct so far) for each distinct Downlink object of module
    ``name``, in client order: a broadcast adapter (one object shared by every client) is
    certified once."""
    seen: set[int] = set()
    for k, client in enumerate(result.downlinks):
        down = client[name]
        if id(down) not in seen:
            seen.add(id(down))
            yield k, down, len(seen)


def exact_factors(updates, name, a, scales, single, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact aggregate's factors X (m, R), Y (R, n) in ``dtype`` (float64 here): the
    weights and scales are applied in ``dtype``, one rounding per factor entry for each."""
    cx, cy = _coefficients(a, scales, single)
    Y = _weighted([u.factors[name][1] for u in updates], cy, -2, dtype)
    if single:
        return Y.mT, Y
    return _weighted([u.factors[name][0] for u in updates], cx, -1, dtype), Y


def upload_parts(updates, name, a, scales) -> StackParts:
    """Module ``name`` of two-factor ``updates`` as :class:`StackParts`: client k's B_k^T and
    A_k as uploaded, coefficient a_k s_k."""
    return StackParts(tuple(u.factors[name][0].mT for u in updates), tuple(u.factors[name][1] for u in updates),
                      tuple(a_k * s_k for a_k, s_k in zip(a, scales)))


def _coefficients(a, scales, single: bool) -> tuple[list[float] | None, list[float]]:
    """Each client's coefficient on X's and on Y's entries (host floats): sqrt(a_k) and
    sqrt(a_k) s_k; single-matrix uploads (X = Y^T) sqrt(a_k s_k) on Y alone (X's None)."""
    if single:
        return None, [math.sqrt(a_k * s_k) for a_k, s_k in zip(a, scales)]
    return [math.sqrt(a_k) for a_k in a], [math.sqrt(a_k) * s_k for a_k, s_k in zip(a, scales)]


def _weighted(parts: list[torch.Tensor], coefficients: list[float], dim: int, dtype: torch.dtype) -> torch.Tensor:
    """The parts joined along ``dim`` in ``dtype``, part k's entries times coefficients[k]:
    one join, one cast and one in-place product per part, each entry the same number as
    ``c * part.to(dtype)`` (the cast exact, one rounding in the product)."""
    joined = torch.cat(parts, dim=dim) if len({t.dtype for t in parts}) == 1 else \
        torch.cat([t.to(dtype) for t in parts], dim=dim)
    out = joined.to(dtype)
    at = 0
    for t, c in zip(parts, coefficients):
        width = t.shape[dim]
        out.narrow(dim, at, width).mul_(c)
        at += width
    return out


def update_factors(down: Downlink, name: str, k: int, single: bool, X: torch.Tensor, Y: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The certified update of one downlink as U (m, p), V (p, n) in X's dtype: its merged
    products and its start adapter, side by side (each term's scale applied in that dtype,
    one rounding per entry)."""
    terms = update_terms(down, name, k, single)
    f64 = X.dtype
    Us, Vs = [], []
    for f in terms:
        if single:
            c = math.sqrt(abs(f.scale))
            Us.append(math.copysign(c, f.scale) * f.A.to(f64).mT)
            Vs.append(c * f.A.to(f64))
        else:
            Us.append(f.scale * f.B.to(f64))
            Vs.append(f.A.to(f64))
    m, n = X.shape[0], Y.shape[1]
    if not terms:  # no update: G = 0
        return X.new_zeros(m, 0), Y.new_zeros(0, n)
    U, V = torch.cat(Us, dim=1), torch.cat(Vs)
    check_update_shape(U.shape[0], V.shape[1], m, n, name, k)
    return U, V


def update_terms(down: Downlink, name: str, k: int, single: bool) -> list[Factors]:
    """The terms of client k's downlink of module ``name`` that its weights change by (the
    merged products, then the start adapter), refused with the client and module named
    when it is not a Downlink or mixes single-matrix and (B, A) factors with the uploads'."""
    if not isinstance(down, Downlink):
        raise TypeError(f"result.downlinks[{k}][{name!r}] must be a Downlink, got {type(down).__name__}")
    terms: list[Factors] = list(down.merge) + ([down.start] if down.start is not None else [])
    for f in terms:
        if (f.B is None) != single:
            raise ValueError(f"result.downlinks[{k}][{name!r}] mixes single-matrix and (B, A) factors with the uploads'")
    return terms


def check_update_shape(rows: int, cols: int, m: int, n: int, name: str, k: int) -> None:
    """Refuse a downlink whose product is not the exact aggregate's (m, n), naming both."""
    if rows != m or cols != n:
        raise ValueError(f"result.downlinks[{k}][{name!r}] multiplies out to ({rows}, {cols}), "
                         f"the exact aggregate of the uploads is ({m}, {n})")


NARROW = (torch.float32, torch.bfloat16, torch.float16)
"""Dtypes whose finite numbers, times a coefficient within 2^-40..2^40
(:data:`NARROW_EXPONENT`), have float64 products that neither under- nor overflow in a
probe's arithmetic (:mod:`fraq.aggregators.probe_certificate`, "Range"): an entry lies in
[2^-189, 2^168], a probe entry below 2^4 in magnitude, every inner length below 2^20, so
S z stays below 2^380 and its squared norm below 2^780; a nonzero product of two entries
and a probe entry (at least 2^-60 in magnitude: torch's Gaussian draws) is at least 2^-438,
its square above 2^-880, far from float64's smallest normal 2^-1022."""

NARROW_EXPONENT = 40
"""The coefficients' bound in :data:`NARROW`: |c| within 2^-40..2^40 (or c = 0)."""


def narrow_coefficients(coefficients) -> bool:
    """Whether every coefficient (host floats: weights, scales and their products) is 0 or
    within 2^-NARROW_EXPONENT..2^NARROW_EXPONENT in magnitude (:data:`NARROW`)."""
    lo, hi = 2.0 ** -NARROW_EXPONENT, 2.0 ** NARROW_EXPONENT
    return all(c == 0.0 or lo <= abs(c) <= hi for c in coefficients)


def narrow_downlink(down: object, single: bool) -> bool:
    """Whether a downlink's certified update U V is made of :data:`NARROW` numbers: every
    term's factors of a narrow dtype and its scale a narrow coefficient (as
    :func:`update_factors` applies it). False for anything that is not a Downlink
    (:func:`update_factors` then names it)."""
    if not isinstance(down, Downlink):
        return False
    terms = list(down.merge) + ([down.start] if down.start is not None else [])
    for f in terms:
        if any(t is not None and t.dtype not in NARROW for t in (f.B, f.A)):
            return False
    return narrow_coefficients([math.sqrt(abs(f.scale)) if single else f.scale for f in terms])


def unscaled(exact: ExactAggregate, downs: list) -> bool:
    """Whether a module is certified on its factors as they are, without the powers of two
    of :func:`unit_scaled`: the exact aggregate and every distinct downlink (``downs``, as
    :func:`distinct_downlinks` gives them) made of :data:`NARROW` numbers. Scaling by powers
    of two is exact where nothing under- or overflows, and there it would change no computed
    ratio, only the powers of two it takes out (the module docstring's "Range")."""
    return exact.narrow and all(narrow_downlink(d, exact.single) for _, d, _ in downs)


def unit_scaled(X: torch.Tensor, Y: torch.Tensor, ks: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """(X 2^-k_X, Y 2^-k_Y, (k_X, k_Y)) for X (m, q), Y (q, n) with X's columns first balanced
    against Y's rows (:func:`fraq._range.balance`: X Y unchanged), every step a power of two
    (exact but for what then falls below float64's normal range). ``ks`` None: k_X + k_Y
    is the balanced pair's exponent sum (largest entries), split evenly, so the product's
    scale is near 1 and its Grams neither under- nor overflow; given (the exact aggregate's,
    for an update's U, V), the same scale is taken out, so relative errors are unchanged.
    k_X, k_Y are int64 0-d tensors on X's device (no host read)."""
    Xb, Yb = balance(X[None], Y[None], torch.ones(1, dtype=torch.bool, device=X.device))
    if ks is None:
        total = exponent(Xb)[0] + exponent(Yb)[0]
        kx = torch.div(total, 2, rounding_mode="floor")
        ks = (kx, total - kx)
    kx, ky = ks
    return scale_pow2(Xb, -kx, parts=2)[0], scale_pow2(Yb, -ky, parts=2)[0], ks


def _exact_terms(X, Y) -> tuple[torch.Tensor, torch.Tensor]:
    """ss = ||S||_F^2 and N_S of the exact aggregate, on the device: (m + n) R^2 multiply-adds."""
    GX, GY = X.mT @ X, Y @ Y.mT
    return (GX * GY).sum(), (GX.diagonal().clamp_min(0) * GY.diagonal().clamp_min(0)).sqrt().sum()


def _terms(exact, X, Y, U, V, ks) -> torch.Tensor:
    """[ss, sg, gg, N_S, N_G, c, k] for one downlink of a module (k = k_X + k_Y, the power of
    two taken out by :func:`unit_scaled`), on the device (no host read): (m + n)(R p + p^2)
    multiply-adds beside the module's :func:`_exact_terms`."""
    ss, NS = exact
    GU, GV = U.mT @ U, V @ V.mT
    gg = (GU * GV).sum()
    sg = ((U.mT @ X) * (V @ Y.mT)).sum()
    NG = (GU.diagonal().clamp_min(0) * GV.diagonal().clamp_min(0)).sqrt().sum()
    c = X.shape[0] + Y.shape[1] + max(X.shape[1], U.shape[1]) ** 2 + 8
    return torch.stack([ss, sg, gg, NS, NG, ss.new_tensor(float(c)), (ks[0] + ks[1]).to(ss.dtype)])


def _certificate(ss: float, sg: float, gg: float, NS: float, NG: float, c: float, k: float, T: float, *,
                 stored: torch.dtype | None, client: int | None) -> ModuleCertificate:
    """The bound of the module docstring, from the computed Gram terms of the pairs scaled
    by 2^-k (``exact_norm`` alone has the scale put back), with a stored stack's w."""
    d2 = ss - 2.0 * sg + gg
    delta = _SAFETY * c * _U * (NS + NG) ** 2 + c ** 3 * _ETA
    delta_s = _SAFETY * c * _U * NS ** 2 + c ** 3 * _ETA
    inf = math.inf
    if not all(math.isfinite(v) for v in (ss, sg, gg, NS, NG, T)):  # an overflowed factor: inf, never a nan bound
        return ModuleCertificate(error=math.nan, bound=inf, resolution=inf, at_rounding_level=False,
                                 exact_norm=times_pow2(math.sqrt(max(ss, 0.0)), int(k)) if math.isfinite(ss) else inf,
                                 client=client)
    w = stored_slack(stored, NS, T, int(k))
    norm = math.sqrt(max(ss, 0.0))
    low = math.sqrt(max(ss - delta_s, 0.0)) - w
    at_rounding = math.sqrt(max(d2, 0.0)) <= math.sqrt(delta) + w
    error = math.sqrt(max(d2, 0.0)) / norm if norm > 0 else (0.0 if at_rounding else inf)
    bound = (math.sqrt(max(d2 + delta, 0.0)) + w) / low if low > 0 else inf
    resolution = (math.sqrt(delta) + w) / norm if norm > 0 else inf
    return ModuleCertificate(error=error, bound=bound, resolution=resolution, at_rounding_level=at_rounding,
                             exact_norm=times_pow2(norm, int(k)), client=client)


def stored_slack(stored: torch.dtype | None, NS: float, T: float, k: int) -> float:
    """w, the bound on ||S - X'Y'||_F of stacks stored in ``stored`` (module docstring),
    in the units of the pair scaled by 2^-k: N_S is scaled already, T (unscaled) is not.
    0 for factors formed in float64 here (``stored`` None)."""
    if stored is None:
        return 0.0
    fi = torch.finfo(stored)
    eta_exp = math.frexp(fi.smallest_normal * fi.eps)[1] - 1  # eta_d = 2^eta_exp, the smallest subnormal
    return _SAFETY * (8.0 * (fi.eps / 2) * NS + times_pow2(T, eta_exp - k))


def times_pow2(x: float, k: int) -> float:
    """x 2^k as a Python float: inf past float64's range (math.ldexp raises there)."""
    try:
        return math.ldexp(x, k)
    except OverflowError:
        return math.inf
