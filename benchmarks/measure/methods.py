"""The methods the suites compare, by name, on one calling convention.

Every method takes the clients' factors of a batch of equal-shape modules and returns
the global adapter, so FRAQ, its backends and the baselines are timed on the same
inputs doing the same job (the server's aggregation for those modules):

    fn(Bs, As, *, rank=None, tau=None, weights=None, scales=None) -> (Bg, Ag, p)

``Bs[k]`` is (*, m, r_k), ``As[k]`` (*, r_k, n); ``Bg @ Ag`` approximates
sum_k a_k s_k B_k A_k; ``p`` is the rank per matrix (int, or int64 tensor of the batch
shape). Names:

- ``fraq``: :func:`fraq.stack` + :func:`fraq.recompress` with its defaults (backend
  ``"auto"``, the device's entry of :data:`fraq.backends.DEVICE_DEFAULTS`; ``gram="auto"``;
  an older commit's own defaults when :mod:`benchmarks.regress` measures one).
- ``fraq:<backend>``: the same with ``backend=<backend>``, for every name in
  :data:`fraq.BACKENDS` when the suite is imported.
- ``fraq-paper``: the paper's configuration, ``gram="product"`` with a float32 eigensolver
  (the library's default Gram form is chosen by cost and its eigensolver is float64).
- ``florist``, ``flexlora``: the aggregator's documented per-module entry
  ``get_aggregator(name).aggregate_batch`` (stacking included, like FRAQ's).
- ``qr-svd``, ``rsvd``: the textbook recompression and a randomized SVD of the product
  operator (:mod:`benchmarks.measure.textbook`), the baselines that do not square kappa.

Every call goes through fraq's public API, so the suite measures whatever fraq the
process imports (:mod:`benchmarks.regress` points it at each commit's own checkout).
A name the imported fraq does not have raises NotImplementedError naming it, which asv
reports as a skipped benchmark and pytest as a skip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["BASELINES", "PAPER_CONFIG", "TEXTBOOK", "MethodSpec", "SPECS", "clients_as_batch", "default_backend",
           "get_method", "runs_backend", "spec"]


@dataclass(frozen=True)
class MethodSpec:
    """What the suites need to know about a compared method besides its callable.

    Attributes:
        name: the method's name (:func:`get_method`).
        max_d: the largest smaller side d (= min(m, n)) the suites run it at, or None for no
            limit; larger d is skipped with :meth:`skip_reason`'s reason.
        why: the reason for ``max_d``.
        slow: few repeats and no warm-up call when timing it (each call takes seconds).
        energy_rule: whether it cuts by ``tau`` (False: its own rank rule).
        nested: its rank-p result is the first p columns of B_g and rows of A_g of its
            rank-P result for any P >= p (a truncated SVD), so a sweep over p can
            decompose once at the largest p and cut.
    """

    name: str
    max_d: int | None = None
    why: str = ""
    slow: bool = False
    energy_rule: bool = True
    nested: bool = False

    def skip_reason(self, d: int) -> str | None:
        """Why the method is not run at smaller side ``d``, or None when it is."""
        if self.max_d is not None and d > self.max_d:
            return f"{self.name} at d={d}: {self.why}; the suites stop at d={self.max_d}"
        return None

    def timing(self, repeats: int) -> dict:
        """``timed``'s repeats and warm-up for this method, from the experiment's ``repeats``."""
        return dict(repeats=min(repeats, 3), warmup=0) if self.slow else dict(repeats=repeats, warmup=1)


SPECS: dict[str, MethodSpec] = {
    "flexlora": MethodSpec(
        "flexlora", max_d=1024, slow=True, energy_rule=False, nested=True,
        why="a dense d x D aggregate and its SVD per module, O(D d^2) (~5 s for 12 modules at d = 768, "
            "minutes at d = 4096, one thread)"),
}
"""Methods with limits or peculiarities; any other name gets a plain :class:`MethodSpec`."""


def spec(name: str) -> MethodSpec:
    """The :class:`MethodSpec` of method ``name``."""
    return SPECS.get(name) or MethodSpec(name)


BASELINES = ("florist", "flexlora")
"""Baselines in the paper's Fig. 3 and Table 4 comparisons."""

TEXTBOOK = ("qr-svd", "rsvd")
"""The baselines a numerical analyst adds (:mod:`benchmarks.measure.textbook`)."""

PAPER_CONFIG = "fraq-paper"
"""FRAQ in the paper's configuration: the product Gram and a float32 eigensolver."""


def default_backend(device: torch.device | str = "cpu") -> str:
    """The backend ``fraq`` (recompress's default) runs on ``device``: what a FLOP model of
    that method must count. ``"householder"`` for a fraq without ``backend="auto"``."""
    try:
        from fraq.backends import resolve_backend
    except ImportError:  # an older commit (benchmarks.regress): householder was the default
        return "householder"
    return resolve_backend("auto", device)


def default_path(d: int, D: int, r: int, p: int) -> dict:
    """The FLOP model's path flags (``factored``, and ``identity`` when set) of what ``fraq``
    (recompress's defaults) runs on a d x D matrix of stacked rank r whose clients do not
    cancel: :func:`fraq.flops.cheapest_path`. For an older fraq without it
    (``benchmarks.regress``): factored when its default Gram form is, never the identity."""
    try:
        from fraq.flops import cheapest_path
    except ImportError:
        import inspect

        import fraq

        gram = inspect.signature(fraq.recompress).parameters.get("gram")
        return {"factored": gram is not None and gram.default in ("auto", "factored")}
    path = cheapest_path(min(d, D), max(d, D), r, min(p, d, D, r))
    return _flags(path.factored, path.identity)


def runs_backend(name: str) -> bool:
    """Whether method ``name`` runs FRAQ's basis backends, so that its FLOP model needs the
    backend and the Gram form: its aggregator class's ``basis_backend``."""
    from fraq.aggregators import AGGREGATORS

    cls = AGGREGATORS.get(name.split(":", 1)[0])
    if cls is None:
        return False
    # An older fraq (benchmarks.regress) predates the attribute; only its FRAQ ran backends.
    return bool(getattr(cls, "basis_backend", cls.name == "fraq"))


def ran_path(res) -> dict:
    """The FLOP model's path flags of what a :class:`fraq.RecompressResult` ran: ``factored``
    when every matrix's Gram was (``gram="factored"``, or ``"auto"`` with no matrix sent
    through H), ``identity`` when the basis was (``info["basis"]``, r >= d)."""
    info = res.info
    factored = info.get("gram", "product") != "product" and info.get("product_gram_count", 0) == 0
    return _flags(factored, info.get("basis") == "identity")


def _flags(factored: bool, identity: bool) -> dict:
    """Only the flags a fraq of any commit accepts: ``identity`` is passed when set."""
    return {"factored": factored, "identity": True} if identity else {"factored": factored}


def _fraq(backend: str | None, **options) -> Callable:
    """FRAQ with ``backend``, or with recompress's own default when None, and ``options``."""
    import fraq

    if backend is not None and backend not in fraq.BACKENDS:
        raise NotImplementedError(f"backend {backend!r} is not in fraq.BACKENDS ({sorted(fraq.BACKENDS)})")
    chosen = {**({} if backend is None else {"backend": backend}), **options}

    def run(Bs, As, *, rank=None, tau=None, weights=None, scales=None):
        B, A = fraq.stack(Bs, As, weights, scales)
        res = fraq.recompress(B, A, rank=rank, tau=tau, **chosen)
        return res.B, res.A, res.rank

    return run


def _aggregator(name: str) -> Callable:
    """The baseline ``name``'s ``aggregate_batch``, on this module's convention."""
    from fraq.aggregators import get_aggregator

    try:
        agg = get_aggregator(name)
    except (KeyError, ValueError) as exc:
        raise NotImplementedError(f"fraq.aggregators has no {name!r}: {exc}") from None
    return agg.aggregate_batch


def get_method(name: str) -> Callable:
    """The callable for method ``name`` (see the module docstring)."""
    if name == "fraq":
        return _fraq(None)
    if name == PAPER_CONFIG:
        return _fraq(None, gram="product", eig_dtype=torch.float32)
    if name in TEXTBOOK:
        from benchmarks.measure import textbook

        return textbook.qr_svd if name == "qr-svd" else textbook.rsvd
    if name.startswith("fraq:"):
        return _fraq(name.split(":", 1)[1])
    return _aggregator(name)


def clients_as_batch(Bs: list[torch.Tensor], As: list[torch.Tensor], i: int) -> tuple[list, list]:
    """Module ``i`` of a batch of client factors (views, no copies)."""
    return [b[i] for b in Bs], [a[i] for a in As]
