"""The methods the suites compare, by name, on one calling convention.

Every method takes the clients' factors of a batch of equal-shape modules and returns
the global adapter, so FRAQ, its backends and the baselines are timed on the same
inputs doing the same job (the server's aggregation for those modules):

    fn(Bs, As, *, rank=None, tau=None, weights=None, scales=None) -> (Bg, Ag, p)

``Bs[k]`` is (*, m, r_k), ``As[k]`` (*, r_k, n); ``Bg @ Ag`` approximates
sum_k a_k s_k B_k A_k; ``p`` is the rank per matrix (int, or int64 tensor of the batch
shape). Names:

- ``fraq``: :func:`fraq.stack` + :func:`fraq.recompress` with its defaults (backend
  ``"auto"``, the device's entry of :data:`fraq._defaults.DEFAULTS`; ``gram="auto"``;
  an older commit's own defaults when :mod:`benchmarks.regress` measures one).
- ``fraq:backend=<backend>``: the same with that backend, for every name in
  :data:`fraq.BACKENDS`; any other ``fraq:KEY=VALUE,...`` passes its options to
  :func:`fraq.recompress` (``fraq:backend=cholesky,gram=product``).
- ``fraq-paper``: the paper's configuration, ``gram="product"`` with a float32 eigensolver
  (the library's default Gram form is chosen by cost and its eigensolver is float64).
- ``florist``, ``flexlora``: the aggregator's documented per-module entry
  ``get_aggregator(name).aggregate_batch`` (stacking included, like FRAQ's).
- ``qr-svd``, ``rsvd``: the textbook recompression and a randomized SVD of the product
  operator (:mod:`benchmarks.measure.textbook`), the baselines that do not square kappa.

A name is read by :class:`fraq.methods.MethodSpec` (:func:`split_method`), the grammar of
every front door, so ``fraq:cholesky`` (a backend without its key) is refused with the
spelling to use; ``tau`` and ``rank`` are the call's (the experiment's), never a name's
options. Every call goes through fraq's public API, so the suite measures whatever fraq
the process imports (:mod:`benchmarks.regress` points it at each commit's own checkout).
A name the imported fraq does not have raises NotImplementedError naming it, which asv
reports as a skipped benchmark and pytest as a skip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

__all__ = ["BASELINES", "PAPER_CONFIG", "TEXTBOOK", "MethodTraits", "TRAITS", "clients_as_batch", "default_backend",
           "get_method", "runs_backend", "split_method", "traits"]


@dataclass(frozen=True)
class MethodTraits:
    """What the suites need to know about a compared method besides its callable: its
    limits and its timing and rank peculiarities (the method itself is named by a
    :class:`fraq.methods.MethodSpec` string, :func:`get_method`).

    Attributes:
        name: the method's name (:func:`get_method`).
        max_d: the largest smaller side d (= min(m, n)) the suites run it at, or None for no
            limit; larger d is skipped with :meth:`skip_reason`'s reason.
        why: the reason for ``max_d``.
        slow: few repeats and no warm-up call when timing it (each call takes seconds).
        nested: its rank-p result is the first p columns of B_g and rows of A_g of its
            rank-P result for any P >= p (a truncated SVD), so a sweep over p can
            decompose once at the largest p and cut. For a registered aggregator,
            :func:`traits` takes it from the class (``Aggregator.nested``), where the
            method says what it is.
    """

    name: str
    max_d: int | None = None
    why: str = ""
    slow: bool = False
    nested: bool = False

    def skip_reason(self, d: int) -> str | None:
        """Why the method is not run at smaller side ``d``, or None when it is."""
        if self.max_d is not None and d > self.max_d:
            return f"{self.name} at d={d}: {self.why}; the suites stop at d={self.max_d}"
        return None

    def timing(self, repeats: int) -> dict:
        """``timed``'s repeats and warm-up for this method, from the experiment's ``repeats``."""
        return dict(repeats=min(repeats, 3), warmup=0) if self.slow else dict(repeats=repeats, warmup=1)


TRAITS: dict[str, MethodTraits] = {
    "flexlora": MethodTraits(
        "flexlora", max_d=1024, slow=True,
        why="a dense d x D aggregate and its SVD per module, O(D d^2) (~5 s for 12 modules at d = 768, "
            "minutes at d = 4096, one thread)"),
}
"""The suites' limits for methods too slow to run everywhere (a policy of the suites, not a
property of the method); any other name gets a plain :class:`MethodTraits`."""


def traits(name: str) -> MethodTraits:
    """The :class:`MethodTraits` of method ``name``: the suites' limits from :data:`TRAITS`,
    ``nested`` from the aggregator's class when ``name`` names a registered aggregator."""
    base = TRAITS.get(name) or MethodTraits(name)
    try:
        from fraq.aggregators import AGGREGATORS

        cls = AGGREGATORS.get(split_method(name)[0])
    except (ImportError, NotImplementedError, ValueError):  # an older fraq, or text outside the grammar
        cls = None
    nested = getattr(cls, "nested", None)
    return base if not isinstance(nested, bool) else replace(base, nested=nested)


def split_method(name: str) -> tuple[str, dict]:
    """The registry name and the options (keyword arguments) of method ``name``, read by
    :meth:`fraq.methods.MethodSpec.parse`: ``"fraq:backend=cholesky"`` -> ``("fraq",
    {"backend": "cholesky"})``; ValueError naming ``name`` for text outside the grammar.

    A fraq without :mod:`fraq.methods` (an older commit, :mod:`benchmarks.regress`) reads
    the names without options and raises NotImplementedError (asv's skip) for the rest.
    """
    try:
        from fraq.methods import MethodSpec
    except ImportError:
        if ":" in name:
            raise NotImplementedError(f"method {name!r}: this fraq has no fraq.methods to read its options") from None
        return name, {}
    parsed = MethodSpec.parse(name)
    return parsed.name, parsed.kwargs


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

    cls = AGGREGATORS.get(split_method(name)[0])
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


def _fraq(**chosen) -> Callable:
    """FRAQ with recompress's options ``chosen`` (its own defaults for the rest)."""
    import fraq

    backend = chosen.get("backend")
    if backend is not None and backend not in fraq.BACKENDS:
        raise NotImplementedError(f"backend {backend!r} is not in fraq.BACKENDS ({sorted(fraq.BACKENDS)})")

    def run(Bs, As, *, rank=None, tau=None, weights=None, scales=None):
        B, A = fraq.stack(Bs, As, weights, scales)
        res = fraq.recompress(B, A, rank=rank, tau=tau, **chosen)
        return res.B, res.A, res.rank

    return run


def _aggregator(name: str, **options) -> Callable:
    """The baseline ``name``'s ``aggregate_batch`` (the aggregator built with ``options``),
    on this module's convention."""
    from fraq.aggregators import AGGREGATORS, get_aggregator

    if name not in AGGREGATORS:
        raise NotImplementedError(f"fraq.aggregators has no {name!r} (it has {sorted(AGGREGATORS)})")
    return get_aggregator(name, **options).aggregate_batch


def get_method(name: str) -> Callable:
    """The callable for method ``name`` (see the module docstring); ValueError for a name
    outside the grammar (:func:`split_method`), before anything is built."""
    base, options = split_method(name)
    if {"tau", "rank"} & set(options):
        raise ValueError(f"method(={name!r}): tau and rank are the call's (the experiment's), not the method's")
    if base == "fraq":
        return _fraq(**options)
    if base in (PAPER_CONFIG, *TEXTBOOK) and options:
        raise ValueError(f"method(={name!r}): {base} takes no options")
    if base == PAPER_CONFIG:
        return _fraq(gram="product", eig_dtype=torch.float32)
    if base in TEXTBOOK:
        from benchmarks.measure import textbook

        return textbook.qr_svd if base == "qr-svd" else textbook.rsvd
    return _aggregator(base, **options)


def clients_as_batch(Bs: list[torch.Tensor], As: list[torch.Tensor], i: int) -> tuple[list, list]:
    """Module ``i`` of a batch of client factors (views, no copies)."""
    return [b[i] for b in Bs], [a[i] for a in As]
