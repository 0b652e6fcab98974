"""Modules aggregated together, and their batching.

A round's modules that share a shape, per-client ranks, scales and dtype form one
:class:`Group`. In batched mode (the default) a group's modules are stacked along a
leading batch dimension, so every factorization runs as one batched call per group (the
paper's "batched" curves); with ``batched=False`` every module is its own group of batch
shape () (the "unbatched" curves). Methods see (*, m, r) tensors either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fraq._validation import check_finite, maybe_non_finite
from fraq.aggregators.payload import ClientUpdate
from fraq._stack import fill_stacks

__all__ = ["Group", "ModuleSpec", "weighted_overflow"]


@dataclass(frozen=True)
class ModuleSpec:
    """One adapted module as the clients uploaded it.

    ``m`` is None for single-matrix uploads (FLoRG), whose A_k is (r, n) with n = min(m, n).
    """

    name: str
    m: int | None
    n: int
    ranks: tuple[int, ...]
    scales: tuple[float, ...]
    dtype: torch.dtype
    device: torch.device

    @property
    def key(self) -> tuple:
        return (self.m, self.n, self.ranks, self.scales, self.dtype, str(self.device))


class Group:
    """Modules aggregated together: one shape, one rank and one scale per client.

    Attributes:
        specs: the modules, in upload order.
        batched: True when the factors carry a leading module dimension (L, *, *).
        weights: normalized client weights a_k.
        checked: True when the uploads were already scanned for NaN and infinity.

    A group built from ``stacks`` (a :class:`~fraq.aggregators.RoundBuffer`'s, filled as
    the uploads arrived) holds no uploads: :meth:`stacked` returns those stacks, weighted
    and scaled, in the group's dtype, and a method that asks for the clients' factors
    (:meth:`module_factors`, :meth:`client_factors`) is refused. Only a method whose class
    says ``from_stacks`` is given such a group.
    """

    def __init__(self, specs: Sequence[ModuleSpec], updates: Sequence[ClientUpdate], weights: list[float],
                 batched: bool, checked: bool = False, *,
                 stacks: tuple[torch.Tensor | None, torch.Tensor] | None = None):
        self.specs = tuple(specs)
        self.batched = batched
        self.checked = checked
        self.weights = weights
        self._updates = updates
        self._stacked: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        self._stacks = stacks

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs)

    @property
    def spec(self) -> ModuleSpec:
        """The first module; every module of the group shares its shape, ranks and scales."""
        return self.specs[0]

    def module_factors(self, k: int) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
        """Client ``k``'s per-module factors, unstacked: two lists of length L."""
        self._need_updates()
        f = self._updates[k].factors
        return [f[s.name][0] for s in self.specs], [f[s.name][1] for s in self.specs]

    def client_factors(self) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
        """Per client, the group's factors: K tensors (L, m, r_k) and (L, r_k, n), or unbatched.

        Stacking copies the factors once per round; the result is cached.
        """
        self._need_updates()
        if self._stacked is None:
            Bs, As = [], []
            for k in range(len(self._updates)):
                b, a = self.module_factors(k)
                Bs.append(None if b[0] is None else self._stack(b))
                As.append(self._stack(a))
            self._stacked = (Bs, As)
        return self._stacked

    def _need_updates(self) -> None:
        if self._stacks is not None:
            raise ValueError(f"group {list(self.names)} was built from a round buffer's stacks and holds no "
                             "client factors: only a method with from_stacks = True reads it")

    def stacked(self, dtype: torch.dtype | None = None, *, scaled: bool = True, scan: bool = True
                ) -> tuple[torch.Tensor | None, torch.Tensor]:
        r"""The group's exact weighted stacks (:func:`fraq.stack`'s Eq. 7), in one pass of copies.

        Returns B (L, m, r), column-major like :func:`fraq.stack`'s, and A (L, r, n), with
        r = sum_k r_k; without the L dimension when the group is unbatched:

        .. math::
            B = [\sqrt{a_1} B_1, \dots, \sqrt{a_K} B_K], \qquad
            A = [\sqrt{a_1} s_1 A_1; \dots; \sqrt{a_K} s_K A_K].

        The stacks are filled by :func:`fraq._stack.fill_stacks`, the one implementation of
        the stacking: each client's per-module factors are copied straight into their slice
        of the stacks and scaled there, with no (L, m, r_k) intermediate as
        :meth:`client_factors` would make and :func:`fraq.stack` copy again. ``dtype``
        defaults to the clients'; pass float32 for bf16 clients to keep the stacks free of
        a second rounding. ``scaled=False`` leaves the LoRA scales s_k out of A. Single-matrix
        uploads (B_k None) give B None and the row stack A. Unless :attr:`checked` (or
        ``scan=False``: a caller whose next step reads NaN and Inf anyway, and then calls
        :meth:`name_non_finite`), NaN or Inf in a factor raise a ValueError naming the
        client and module, screened on both stacks by one sum each and one host read
        (:func:`fraq._validation.maybe_non_finite`); only a non-finite total pays for the
        exact scan.

        A group built from a round buffer's ``stacks`` returns them (its uploads were
        scanned as they arrived); any other ``dtype`` or ``scaled=False`` is refused, as
        those stacks exist only in the group's dtype, scaled.
        """
        spec = self.spec
        if self._stacks is not None:
            if (dtype is not None and dtype != spec.dtype) or not scaled:
                raise ValueError(f"group {list(self.names)} holds only its weighted, scaled stacks in {spec.dtype} "
                                 f"(a round buffer's); got dtype={dtype}, scaled={scaled}")
            return self._stacks
        dtype = dtype or spec.dtype
        lead = (len(self.specs),) if self.batched else ()
        r = sum(spec.ranks)
        B = None if spec.m is None else torch.empty(*lead, r, spec.m, dtype=dtype, device=spec.device).mT
        A = torch.empty(*lead, r, spec.n, dtype=dtype, device=spec.device)
        clients = (self.module_factors(k) for k in range(len(self._updates)))
        if not self.batched:
            clients = ((b[0], a[0]) for b, a in clients)
        fill_stacks(B, A, clients, self.weights, spec.scales if scaled else [1.0] * len(spec.scales),
                    in_dtype=dtype == spec.dtype)  # every factor is in spec.dtype: validate_updates checked
        if scan and not self.checked and A.numel():
            stacks = [A] if B is None else [B, A]
            if maybe_non_finite(stacks):
                self.name_non_finite(stacks)
        return B, A

    def name_non_finite(self, stacks: Sequence[torch.Tensor | None]) -> None:
        """Raise the ValueError naming the first client and module whose B or A holds a NaN/Inf,
        if any; called when the group's ``stacks`` may hold one (a cheap screen fired, or the
        recompression found one). Where every upload is finite but the stacks are not, the
        weighting put it there (sqrt(a_k) B_k or sqrt(a_k) s_k A_k past the largest value of
        the stacks' dtype, float16's 65504 the usual case): that is the error then, never a
        silent inf in the result. Finite stacks (a screen's sum that overflowed) pass."""
        self._raise_non_finite("B")
        self._raise_non_finite("A")
        if all(t is None or bool(torch.isfinite(t).all()) for t in stacks):
            return
        raise weighted_overflow(self.names, self.spec.dtype)

    def _raise_non_finite(self, factor: str) -> None:
        """Name the client and module whose factor holds a NaN/Inf, if any."""
        i = 0 if factor == "B" else 1
        for k, u in enumerate(self._updates):
            for s in self.specs:
                check_finite(f"client {k}, module {s.name!r}, {factor}", u.factors[s.name][i])

    def stack_modules(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """Per-module tensors -> one (L, *) tensor (batched), or the one tensor (unbatched)."""
        return self._stack(list(tensors))

    def _stack(self, ts: list[torch.Tensor]) -> torch.Tensor:
        if not self.batched:
            return ts[0]
        return ts[0].unsqueeze(0) if len(ts) == 1 else torch.stack(ts)

    def split(self, t: torch.Tensor) -> list[torch.Tensor]:
        """A result with a leading module dimension -> one view per module."""
        return list(t.unbind(0)) if self.batched else [t]

    def split_prefixes(self, t: torch.Tensor, counts: Sequence[int], dim: int) -> list[torch.Tensor]:
        """A result with a leading module dimension -> module l's first ``counts[l]`` columns
        (``dim=-1``) or rows (``dim=-2``), one view per module (:func:`prefix_views`); the
        unbatched group's one tensor cut alike."""
        if not self.batched:
            return [t[..., : counts[0]] if dim == -1 else t[..., : counts[0], :]]
        return prefix_views(t, counts, dim)


def prefix_views(t: torch.Tensor, counts: Sequence[int], dim: int) -> list[torch.Tensor]:
    """``[t[l, :, :c] for l, c in enumerate(counts)]`` (``dim=-1``) or ``t[l, :c, :]``
    (``dim=-2``) for t (L, a, b): the same views (shape, strides, storage offset), made in
    one C++ call instead of two Python view ops per module (2-4 us each in eager torch, the
    host's per-module cost of a whole-model downlink).

    Where each module's block starts k steps of the cut dimension's stride after the last
    one's, with k at least that dimension's size (any stack torch lays out: contiguous, or a
    transpose of one), the blocks sit at the same positions in one strided view of length
    (L - 1) k + size along the cut dimension (it spans exactly t's elements), which
    ``split_with_sizes`` cuts into [c_0, k - c_0, c_1, k - c_1, ...]; every other piece is
    a module's prefix. Any other layout is cut module by module.
    """
    if t.dim() != 3 or dim not in (-1, -2) or len(counts) != t.shape[0]:
        raise ValueError(f"prefix_views needs t (L, a, b), dim -1 or -2 and L counts; got shape "
                         f"{tuple(t.shape)}, dim={dim}, {len(counts)} counts")
    L, size = t.shape[0], t.shape[dim]
    step, s0 = t.stride(dim), t.stride(0)
    if L == 0:
        return []
    if min(counts) < 0 or max(counts) > size:  # two builtins, not a generator step per module
        raise ValueError(f"counts(={list(counts)}) must lie in [0, {size}]")
    k = s0 // step if step > 0 and s0 % step == 0 else 0
    if L == 1 or k < size or t.numel() == 0:
        return [m[:, :c] if dim == -1 else m[:c] for m, c in zip(t.unbind(0), counts)]
    other = -2 if dim == -1 else -1
    span = (L - 1) * k + size
    shape = (t.shape[other], span) if dim == -1 else (span, t.shape[other])
    stride = (t.stride(other), step) if dim == -1 else (step, t.stride(other))
    flat = t.as_strided(shape, stride, t.storage_offset())
    sizes = [x for c in counts[:-1] for x in (c, k - c)] + [counts[-1], size - counts[-1]]
    return list(flat.split_with_sizes(sizes, dim=1 if dim == -1 else 0)[::2])


def _make_groups(updates, specs, weights, batched, checked: bool = False) -> list[Group]:
    if not batched:
        return [Group((s,), updates, weights, batched=False, checked=checked) for s in specs]
    buckets: dict[tuple, list[ModuleSpec]] = {}
    for s in specs:
        buckets.setdefault(s.key, []).append(s)
    return [Group(b, updates, weights, batched=True, checked=checked) for b in buckets.values()]


def weighted_overflow(names: Sequence[str], dtype: torch.dtype) -> ValueError:
    """The error of finite uploads whose weighted stacks hold an inf or NaN: the weighting took a
    factor past ``dtype``'s largest value (one message for the list path and the round buffer)."""
    return ValueError(
        f"modules {list(names)}: every client's B and A is finite, but the weighted stacks hold an inf or "
        f"NaN: a client's factor times sqrt(a_k) (and its scale s_k on A) passes the largest {dtype} "
        f"({torch.finfo(dtype).max:.3g}); aggregate uploads in a wider dtype (float32)")
