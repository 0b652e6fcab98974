r"""Whether a method on FRAQ's kernel gives what its dense path gives, on the same uploads.

A dense-SVD method (FlexLoRA, FedSVD, FedMomentum) runs on either kernel
(:mod:`fraq.aggregators._kernel`). Its singular vectors are determined only up to sign (and
rotation inside clusters of equal singular values), and a truncation at a rank without a
spectral gap is not unique, so two correct runs need not give the same factors, nor the same
products. What every correct run gives is an update as close to the aggregate as the method
makes it. So, per module and per distinct client downlink, for the client's whole update
(merged products plus warm start, :meth:`~fraq.aggregators.Downlink.delta`) and for its warm
start alone, in float64 and without an m x n matrix (:func:`fraq.reference.relative_error`):

.. math::
    e = \lVert M - \Delta \rVert_F / \lVert M \rVert_F,\qquad
    M = \sum_k a_k s_k B_k A_k,

(for single-matrix uploads, FLoRG's, :math:`M = \sum_k a_k s_k A_k^\top A_k`: the update
:math:`s L A^\top A R` with L, R semi-orthogonal has the same errors), and the two kernels agree where
:math:`|e_\text{fraq} - e_\text{dense}| \le 2\,c\,u\,N /
\lVert M\rVert_F`: each run's update is the method's exact one for a matrix within the
rounding of a product of its factors, :math:`c\,u\,N`, of the one it decomposes, and moving
the matrix by E moves the error of the update by at most :math:`\lVert E\rVert_F` (a best
rank-q approximation's error is 1-Lipschitz in the matrix); c = sqrt(min(m, n)), u the
compute dtype's unit roundoff, N the larger of the stack's and the dense update's
:func:`fraq._gram.scale_sum`. Beside it, the products' own difference
:math:`\lVert \Delta_\text{fraq} - \Delta_\text{dense}\rVert_F / \lVert M\rVert_F`: at
rounding level where the spectrum has gaps at the ranks cut, up to the size of the cut
singular values where it has none.
"""

from __future__ import annotations

import math

import torch

__all__ = ["agreement"]


def _factors(terms) -> tuple[torch.Tensor, torch.Tensor]:
    """The products ``terms`` (:class:`~fraq.aggregators.Factors`) as one pair (B, A) in float64;
    a single-matrix term (FLoRG's, B None) is the product A^T A."""
    Bs = [(f.A.mT if f.B is None else f.B).double() * f.scale for f in terms]
    As = [f.A.double() for f in terms]
    return torch.cat(Bs, dim=-1), torch.cat(As, dim=-2)


def agreement(updates, dense, kernel) -> dict:
    """The agreement of two :class:`~fraq.aggregators.AggregationResult` of one method on
    ``updates`` (the round's :class:`~fraq.aggregators.ClientUpdate` list), ``dense`` on its
    dense path and ``kernel`` on FRAQ's (module docstring).

    Returns a JSON-ready dict: ``compared`` (the (module, downlink, part) triples judged),
    ``modules``, ``ratio_max`` (the largest error difference over its bound: the kernels
    agree where it is at most 1), ``error_difference_max``, ``bound_min`` and
    ``product_difference_max`` (relative to ||M||_F).
    """
    import fraq
    from fraq.internals import scale_sum
    from fraq.internals import compute_dtype
    from fraq.reference import factored_error, reference_svd, relative_error

    out = dict(compared=0, modules=0, ratio_max=0.0, error_difference_max=0.0, bound_min=math.inf,
               product_difference_max=0.0)
    for name in dense.modules:
        Ak = [u.factors[name][1] for u in updates]
        Bk = [A.mT if u.factors[name][0] is None else u.factors[name][0] for u, A in zip(updates, Ak)]
        B, A = fraq.stack(Bk, Ak, [u.weight for u in updates], [u.scale_of(name) for u in updates], dtype=torch.float64)
        m, n = B.shape[-2], A.shape[-1]
        norm = float(reference_svd(B, A)[1].square().sum().sqrt())
        if norm == 0:
            continue
        u = torch.finfo(compute_dtype(Ak[0].dtype)).eps
        c = math.sqrt(min(m, n))
        n_stack = float(scale_sum(B, A))
        out["modules"] += 1
        seen = set()
        for k in range(len(updates)):
            d, f = dense.downlinks[k][name], kernel.downlinks[k][name]
            if (id(d), id(f)) in seen:
                continue
            seen.add((id(d), id(f)))
            for part in ("update", "start"):
                if part == "start" and (d.start is None or not d.merge):
                    continue  # no warm start, or the start is the whole update (judged already)
                terms_d = (*d.merge, d.start) if part == "update" else (d.start,)
                terms_f = (*f.merge, f.start) if part == "update" else (f.start,)
                Bd, Ad = _factors([t for t in terms_d if t is not None])
                Bf, Af = _factors([t for t in terms_f if t is not None])
                e_d, e_f = float(relative_error(B, A, Bd, Ad)), float(relative_error(B, A, Bf, Af))
                bound = 2 * c * u * max(n_stack, float(scale_sum(Bd, Ad))) / norm
                diff = abs(e_f - e_d)
                out["compared"] += 1
                out["ratio_max"] = max(out["ratio_max"], diff / bound)
                out["error_difference_max"] = max(out["error_difference_max"], diff)
                out["bound_min"] = min(out["bound_min"], bound)
                out["product_difference_max"] = max(out["product_difference_max"],
                                                    float(factored_error(Bf, Af, Bd, Ad)) / norm)
    return out
