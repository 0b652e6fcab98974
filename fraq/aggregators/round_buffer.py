r"""A round's uploads taken one client at a time, as they arrive: :class:`RoundBuffer`.

``agg.open_round(shapes, clients=K, ranks=...)`` preallocates what the round needs;
``buf.add(upload)`` checks one client's upload and copies it in; once all K clients are
in, ``buf.aggregate(state)`` returns what ``agg.aggregate(updates, state)`` returns for
the same uploads in client order. A server then holds the round's storage plus the one
upload in flight, never a list of every client's adapter beside the stacks made from it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import torch

from fraq._stack import _column_factors, normalized_weights
from fraq._validation import check_finite, maybe_non_finite
from fraq.aggregators.certificate import NARROW, ExactAggregate, ExactFactors, StackParts, upload_aggregate
from fraq.aggregators.group import Group, ModuleSpec, weighted_overflow
from fraq.aggregators.payload import ClientUpdate
from fraq.aggregators.upload_layout import Layout, check_weight
from fraq.aggregators.validation import _check_scale

__all__ = ["RoundBuffer", "round_layouts"]


class RoundBuffer:
    r"""One round's uploads, added client by client, aggregated once all are in.

    Made by :meth:`fraq.aggregators.Aggregator.open_round`. The modules are grouped into
    blocks of one shape (m, n) and one rank per client (in ``shapes`` order); a client's
    upload is packed block by block as :attr:`layout` says (:mod:`fraq.aggregators.upload_layout`).

    Storage, preallocated once in ``dtype`` on ``device``:

    - a method that reads only stacks (``from_stacks``: FRAQ, FLoRA) gets per block the
      stacks B (L, m, r), column-major, and A (L, r, n), r = sum_k r_k, exactly the
      tensors :meth:`Group.stacked` would build; client k's upload is copied into its
      columns (rows of A) ``lo_k:lo_k + r_k``, and the method reads them as its groups'
      stacks, with no second copy;
    - any other method gets one flat tensor per client in its layout, and the round's
      :class:`ClientUpdate` s are views of them, handed to ``aggregate(list)``.

    Either way the buffer holds sum over modules of (m + n) sum_k r_k entries (FLoRG:
    r_k min(m, n)) and no reference to an upload after :meth:`add` returns, so a
    server's peak is that storage plus one upload (:attr:`storage` lists what is held).

    Weights: the a_k = n_k / sum_j n_j of the stacks are known only when every client is
    in, so each block is stored as uploaded and weighted at :meth:`aggregate`, in place:
    column block k of B times sqrt(a_k), of A times sqrt(a_k) s_k, by the same one
    broadcast multiply per stack :func:`fraq._stack.fill_stacks` runs after its copy. A
    copy is exact, so the stacks are bit for bit those of ``aggregate(list)``, and the
    method's result with them. Weighting on arrival by sqrt(n_k) and rescaling by
    1 / sqrt(sum_j n_j) at the end would round every entry twice and could overflow with
    large raw weights (:func:`fraq._stack.normalized_weights` divides by the largest first).
    The price: the buffer aggregates once (a second :meth:`aggregate` is refused).

    Where a client's LoRA scales differ between modules of one block, the list path
    groups those modules apart (a group shares its scales); so does :meth:`aggregate`,
    by views where such modules are adjacent in the block and a copy of their rows where
    they are not.

    Examples:
        >>> import torch
        >>> from fraq.aggregators import ClientUpdate, get_aggregator
        >>> g = torch.Generator().manual_seed(0)
        >>> f = [(torch.randn(32, r, generator=g, dtype=torch.float64),
        ...       torch.randn(r, 24, generator=g, dtype=torch.float64)) for r in (4, 8)]
        >>> buf = get_aggregator("flora").open_round({"q": (32, 24)}, clients=2, ranks=[4, 8],
        ...                                          dtype=torch.float64)
        >>> buf.add(ClientUpdate({"q": f[1]}, scale=0.5, weight=10), client=1)
        1
        >>> buf.add(ClientUpdate({"q": f[0]}, scale=2.0, weight=30))
        0
        >>> delta = buf.aggregate().downlinks[0]["q"].delta()
        >>> exact = 0.75 * 2.0 * f[0][0] @ f[0][1] + 0.25 * 0.5 * f[1][0] @ f[1][1]
        >>> bool(torch.linalg.norm(delta - exact) <= 1e-13 * torch.linalg.norm(exact))
        True
    """

    def __init__(self, aggregator, shapes: Mapping[str, tuple[int, int]], *, clients: int, ranks,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        K, names, blocks = _round_blocks(aggregator, shapes, clients, ranks)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point or dtype.is_complex:
            raise TypeError(f"dtype(={dtype!r}) must be a real floating torch.dtype")
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device(={device!r}) is not a torch device: {e}") from None
        self.aggregator = aggregator
        self.clients = K
        self.dtype = dtype
        self.device = device
        self._blocks = blocks
        self._names = names
        self._layouts = _layouts(names, blocks, K)
        if aggregator.from_stacks:
            self._stacks = [(None if m is None else torch.empty(len(bn), sum(rk), m, dtype=dtype, device=device),
                             torch.empty(len(bn), sum(rk), n, dtype=dtype, device=device))
                            for bn, m, n, rk in self._blocks]
            self._flats = None
        else:
            self._stacks = None
            self._flats = [torch.empty(lay.numel, dtype=dtype, device=device) for lay in self._layouts]
        self._meta: list[tuple[float, float | Mapping[str, float], int | None] | None] = [None] * K
        self._aggregated = False

    @property
    def layout(self) -> Layout:
        """How a client packs its whole adapter into one flat tensor (:meth:`Layout.pack`,
        :meth:`Layout.unpack`); with ranks that differ between clients, ask :meth:`layout_of`."""
        if any(lay != self._layouts[0] for lay in self._layouts[1:]):
            raise ValueError("the clients' ranks differ, so each has its own layout: use layout_of(client)")
        return self._layouts[0]

    def layout_of(self, client: int) -> Layout:
        """Client ``client``'s :class:`Layout`."""
        return self._layouts[self._client_index(client)]

    @property
    def missing(self) -> tuple[int, ...]:
        """The clients not yet added, in index order."""
        return tuple(k for k, meta in enumerate(self._meta) if meta is None)

    @property
    def storage(self) -> tuple[torch.Tensor, ...]:
        """Every tensor the buffer holds: the blocks' (B^T, A) stacks, or one flat tensor per client."""
        if self._flats is not None:
            return tuple(self._flats)
        return tuple(t for pair in self._stacks for t in pair if t is not None)

    def add(self, update: ClientUpdate | torch.Tensor, *, client: int | None = None, weight: float | None = None,
            scale: float | Mapping[str, float] | None = None, upload_rank: int | None = None) -> int:
        """Check one client's upload and copy it in; returns its client index.

        Args:
            update: a :class:`ClientUpdate`, or one flat tensor in the client's layout
                (:meth:`layout_of`), which comes with ``weight`` (default 1), ``scale``
                (one number or module -> number; default 1) and ``upload_rank``.
            client: its index in [0, K): its column block in the stacks and its place in
                the client order. Default: the lowest index not yet added.

        Everything is checked before anything is copied, so a refused upload leaves the
        buffer as it was: the client index (in range, not added yet), the weight and
        scales, each factor's shape, dtype (the buffer's) and device (the buffer's, or the
        CPU when the buffer is on CUDA), and finiteness, by one sum per tensor and one
        host read (:func:`fraq._validation.maybe_non_finite`); only a non-finite total
        pays for the scan that names the module. Then each block is copied in by one copy
        per factor (B^T and A): from one flat tensor a strided ``copy_``, from a
        :class:`ClientUpdate` one ``torch.stack`` into the slice. From pinned host memory
        to CUDA the copy does not block; the upload must then stay unchanged until the
        device has synchronized (:meth:`aggregate` reads the stacks on the same stream).

        Raises:
            ValueError or TypeError: naming the client and, for a factor, the module.
        """
        if self._aggregated:
            raise ValueError("this round was already aggregated: open a new round")
        k = self._next_client() if client is None else self._client_index(client)
        if self._meta[k] is not None:
            raise ValueError(f"client {k} was already added to this round")
        where = f"client {k}"
        layout = self._layouts[k]
        devices = (self.device,) if self.device.type != "cuda" else (self.device, torch.device("cpu"))
        if isinstance(update, ClientUpdate):
            if weight is not None or scale is not None or upload_rank is not None:
                raise TypeError(f"{where}: a ClientUpdate carries its own weight, scale and upload_rank; pass those "
                                "keywords only with a flat tensor")
            weight, scale, upload_rank = update.weight, update.scale, update.upload_rank
            tensors = layout.check_factors(where, update.factors, self.dtype, devices)
        elif isinstance(update, torch.Tensor):
            flat = layout.check_flat(f"{where}'s flat upload", update)
            if flat.dtype != self.dtype:
                raise TypeError(f"{where}'s flat upload has dtype {flat.dtype}, expected {self.dtype}")
            if flat.device not in devices:
                raise ValueError(f"{where}'s flat upload is on {flat.device}, expected "
                                 f"{' or '.join(map(str, devices))}")
            weight = 1.0 if weight is None else weight
            scale = 1.0 if scale is None else scale
            tensors = [flat]
        else:
            raise TypeError(f"{where}: an upload must be a ClientUpdate or a flat torch.Tensor, "
                            f"got {type(update).__name__}")
        meta = (check_weight(f"{where}'s weight", weight), self._check_scale(where, scale),
                _check_upload_rank(where, upload_rank))
        if maybe_non_finite(tensors):
            up = update if isinstance(update, ClientUpdate) else layout.unpack(update)
            for name in self._names:
                for label, t in zip("BA", up.factors[name]):
                    if t is not None:
                        check_finite(f"{where}, module {name!r}, {label}", t)
        with torch.no_grad():
            for i in range(len(self._blocks)):
                src = layout.blocks[i].views(update) if isinstance(update, torch.Tensor) else \
                    _block_factors(update.factors, layout.blocks[i].names)
                for dst, s in zip(self._destination(k, i), src):
                    if dst is not None:
                        _copy_in(dst, s)
        self._meta[k] = meta
        return k

    def aggregate(self, state: object | None = None):
        """The round's :class:`~fraq.aggregators.AggregationResult`: what
        ``aggregator.aggregate(updates, state)`` returns for the uploads in client order.

        Refused until all K clients are in, and after a first aggregate (the stacks are
        weighted in place: the class docstring's "Weights"). A method that reads only
        stacks gets the buffer's as its groups' (:class:`Group` with ``stacks``); any
        other is handed the uploads as views of the buffer (``aggregate(list)``).
        """
        if self._aggregated:
            raise ValueError("this round was already aggregated: open a new round")
        missing = self.missing
        if missing:
            raise ValueError(f"clients {list(missing)} have not uploaded yet ({self.clients - len(missing)} of "
                             f"{self.clients} are in): aggregate needs every client")
        agg = self.aggregator
        if self._flats is not None:
            updates = [lay.unpack(flat, weight=w, scale=s, upload_rank=u)
                       for lay, flat, (w, s, u) in zip(self._layouts, self._flats, self._meta)]
            result = agg.aggregate(updates, state)
            self._aggregated = True
            return result
        K = self.clients
        scales = [s for _, s, _ in self._meta]  # each a float, or module -> float
        # one tuple for every module where no client gives per-module scales (the usual round): built once,
        # not K + 1 steps a module
        same = None if any(isinstance(s, dict) for s in scales) else tuple(scales)
        spec = {name: ModuleSpec(name, m, n, rk, same if same is not None else
                                 tuple(s[name] if isinstance(s, dict) else s for s in scales), self.dtype, self.device)
                for bn, m, n, rk in self._blocks for name in bn}
        specs = [spec[name] for name in self._names]
        agg._check_ranks(specs)
        state = agg._check_state(state, specs)
        weights = normalized_weights([w for w, _, _ in self._meta], K)
        self._aggregated = True
        roots = tuple(math.sqrt(a) for a in weights)
        groups = []
        for (bn, _, _, rk), (Bt, A) in zip(self._blocks, self._stacks):
            parts: dict[tuple, list[int]] = {}
            for l, name in enumerate(bn):
                parts.setdefault(spec[name].scales, []).append(l)
            if Bt is not None:
                Bt.mT.mul_(_column_factors(roots, rk, self.dtype, self.device))
            factors = {scales: _column_factors(tuple(r * s for r, s in zip(roots, scales)), rk, self.dtype,
                                               self.device) for scales in parts}
            # every module's rows weighted in place, so the stacks hold S' whatever the parts (exact_aggregate)
            A.mul_((factors[spec[bn[0]].scales] if len(parts) == 1 else
                    torch.stack([factors[spec[name].scales] for name in bn])).unsqueeze(-1))
            if (any(abs(r * s_) > 1 for scales in parts for r, s_ in zip(roots, scales)) and maybe_non_finite([A])
                    and not bool(torch.isfinite(A).all())):  # the screen may fire on finite entries: exact scan
                # the uploads were finite as they came in: a scale s_k > 1 took a weighted A_k past the dtype
                raise weighted_overflow(bn, self.dtype)
            for rows in parts.values():
                Bt_g, A_g = (_rows(Bt, rows), _rows(A, rows))
                stacks = (None if Bt_g is None else Bt_g.mT, A_g)
                groups.append(Group([spec[bn[l]] for l in rows], (), weights, batched=True, checked=True,
                                    stacks=stacks))
        groups.sort(key=lambda g: self._names.index(g.spec.name))  # the list path's order: by first module
        return agg._aggregate_groups(specs, groups, state, K)

    def uploads(self) -> dict[int, ClientUpdate]:
        """client -> its upload as added, for the clients in so far, before :meth:`aggregate`:
        views of the buffer (a copy in is exact, so these are the uploads bit for bit), for a
        server that turns to the list path mid-round without having kept an upload."""
        if self._aggregated:
            raise ValueError("this round was already aggregated: its stacks are weighted, not the uploads")
        out = {}
        for k, meta in enumerate(self._meta):
            if meta is None:
                continue
            w, s, u = meta
            if self._flats is not None:
                out[k] = self._layouts[k].unpack(self._flats[k], weight=w, scale=s, upload_rank=u)
                continue
            factors = {}
            for i, (bn, *_) in enumerate(self._blocks):
                Bt, A = self._destination(k, i)
                for l, name in enumerate(bn):
                    factors[name] = (None if Bt is None else Bt[l].mT, A[l])
            out[k] = ClientUpdate({name: factors[name] for name in self._names}, scale=s, weight=w, upload_rank=u)
        return out

    def exact_aggregate(self, result=None) -> ExactAggregate:
        r"""The round's exact aggregate as this buffer holds it, once :meth:`aggregate` has run,
        checked against ``result`` when given: what ``result.certificate(buffer)`` reads, so
        no upload has to be kept for a certificate.

        A method that reads stacks was handed the weighted stacks :math:`X' = [\sqrt{a_k}
        B_k]`, :math:`Y' = [\sqrt{a_k} s_k A_k]`, weighted in place and never written again
        (a method's inputs are not modified); their product is the exact aggregate up to the
        weighting's rounding into the buffer's dtype, which the certificates add to their
        bound (:mod:`fraq.aggregators.certificate`, "Stored stacks"). Any other method's
        uploads are the buffer's flat tensors, read as the uploads themselves, exactly.

        Raises:
            ValueError: before :meth:`aggregate`, or ``result`` of other clients or modules.
        """
        if not self._aggregated:
            raise ValueError("the round buffer holds the exact aggregate only once aggregate() has run: aggregate "
                             "first, then certify")
        if self._flats is not None:
            exact = upload_aggregate([lay.unpack(flat, weight=w, scale=s, upload_rank=u)
                                      for lay, flat, (w, s, u) in zip(self._layouts, self._flats, self._meta)])
        else:
            where = {name: (Bt, A, l) for (bn, *_), (Bt, A) in zip(self._blocks, self._stacks)
                     for l, name in enumerate(bn)}

            def held(name: str) -> tuple[torch.Tensor, torch.Tensor]:
                Bt, A, l = where[name]
                if Bt is None:  # its A rows carry sqrt(a_k) s_k, not the certificate's sqrt(a_k s_k)
                    raise ValueError(f"{self.aggregator.name}: single-matrix stacks cannot be certified from the "
                                     "buffer; certify against the uploads")
                return Bt[l], A[l]

            def factors(name: str) -> ExactFactors:
                Bt, A = held(name)
                return ExactFactors(Bt.mT.double(), A.double(), stored=self.dtype)

            def parts(name: str) -> StackParts:
                Bt, A = held(name)
                return StackParts((Bt,), (A,), None, stored=self.dtype)

            exact = ExactAggregate(self._names, self.clients, False, self.device, factors, "the round buffer",
                                   narrow=self.dtype in NARROW, parts=parts)
        return exact if result is None else exact.check(result)

    def certificate(self, result, method: str = "gram", **probe_options):
        """``result.certificate(self, method, **probe_options)``: ``result`` (this round's)
        certified against the aggregate this buffer holds (:meth:`exact_aggregate`)."""
        return result.certificate(self, method, **probe_options)

    def _destination(self, k: int, i: int) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Where client k's block i goes: (B^T (L, r_k, m) or None, A (L, r_k, n))."""
        if self._flats is not None:
            return self._layouts[k].blocks[i].views(self._flats[k])
        rk = self._blocks[i][3]
        lo = sum(rk[:k])
        Bt, A = self._stacks[i]
        return (None if Bt is None else Bt[:, lo:lo + rk[k]]), A[:, lo:lo + rk[k]]

    def _next_client(self) -> int:
        missing = self.missing
        if not missing:
            raise ValueError(f"all {self.clients} clients of this round are in: refusing one more upload")
        return missing[0]

    def _client_index(self, client: object) -> int:
        if isinstance(client, bool) or not isinstance(client, numbers.Integral) or not 0 <= client < self.clients:
            raise ValueError(f"client(={client!r}) must be an int in [0, {self.clients})")
        return int(client)

    def _check_scale(self, where: str, scale: object) -> float | dict[str, float]:
        if isinstance(scale, Mapping):
            missing = [name for name in self._names if name not in scale]
            if missing:
                raise ValueError(f"{where}'s scale has no entry for modules {missing}")
            return {name: _check_scale(f"{where}'s scale for {name!r}", scale[name]) for name in self._names}
        return _check_scale(f"{where}'s scale", scale)

    def __repr__(self) -> str:
        return (f"RoundBuffer({self.aggregator.name}, {len(self._names)} modules in {len(self._blocks)} blocks, "
                f"{self.clients - len(self.missing)} of {self.clients} clients in, {self.dtype}, {self.device})")


def round_layouts(aggregator, shapes: Mapping[str, tuple[int, int]], *, clients: int, ranks
                  ) -> tuple[Layout, ...]:
    """Each client's :class:`Layout` in ``aggregator.open_round(shapes, clients=clients,
    ranks=ranks)``, with the same checks and no storage: what a server tells its clients
    before the round, so that each packs its upload (:meth:`Layout.pack`) as the buffer
    will read it. A layout depends only on the method (single-matrix or not), the shapes
    in their order and every client's ranks, never on dtype or device."""
    K, names, blocks = _round_blocks(aggregator, shapes, clients, ranks)
    return _layouts(names, blocks, K)


def _round_blocks(aggregator, shapes: object, clients: object, ranks: object
                  ) -> tuple[int, tuple[str, ...], list[tuple]]:
    """(K, module names, blocks) of a round, checked: the modules grouped by (m, n) and
    every client's rank, in ``shapes`` order, each block (names, m or None, n, K ranks),
    m None and n = min(m, n) for a single-matrix method."""
    if isinstance(clients, bool) or not isinstance(clients, numbers.Integral) or clients < 1:
        raise ValueError(f"clients(={clients!r}) must be an int >= 1")
    K = int(clients)
    names = _check_shapes(shapes)
    per_module = _check_ranks(ranks, names, K)
    if not aggregator.heterogeneous_ranks:
        for name in names:
            if len(set(per_module[name])) > 1:
                raise ValueError(f"{aggregator.name} averages factors, so every client needs the same rank per "
                                 f"module; ranks for module {name!r} are {list(per_module[name])}")
    single = aggregator.single_matrix
    grouped: dict[tuple, list[str]] = {}
    for name in names:
        m, n = shapes[name]
        grouped.setdefault((m, n, per_module[name]), []).append(name)
    return K, names, [(tuple(bn), None if single else m, min(m, n) if single else n, rk)
                      for (m, n, rk), bn in grouped.items()]


def _layouts(names: tuple[str, ...], blocks: list[tuple], K: int) -> tuple[Layout, ...]:
    return tuple(Layout.build(names, [(bn, m, n, rk[k]) for bn, m, n, rk in blocks]) for k in range(K))


def _block_factors(factors: Mapping, names: Sequence[str]) -> tuple[list | None, list]:
    """A block's (B^T list or None, A list) from a ClientUpdate's factors."""
    Bs = [factors[name][0] for name in names]
    return (None if Bs[0] is None else [B.mT for B in Bs]), [factors[name][1] for name in names]


def _copy_in(dst: torch.Tensor, src: torch.Tensor | list[torch.Tensor]) -> None:
    """``dst`` (L, r_k, x) <- ``src``, one (L, r_k, x) tensor or L matrices (r_k, x).

    One copy from one tensor, or one ``torch.stack`` into ``dst`` when every matrix is on
    its device; host matrices bound for a CUDA buffer go matrix by matrix (a stack would
    first gather them on the host), without blocking where they are pinned."""
    if isinstance(src, torch.Tensor):
        dst.copy_(src, non_blocking=_pinned(src, dst))
    elif all(t.device == dst.device for t in src):
        torch.stack(src, out=dst)
    else:
        for d, t in zip(dst.unbind(0), src):
            d.copy_(t, non_blocking=_pinned(t, d))


def _pinned(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """Whether a host-to-CUDA copy can skip blocking: the source is in pinned host memory."""
    return dst.device.type == "cuda" and src.device.type == "cpu" and src.is_pinned()


def _rows(t: torch.Tensor | None, rows: list[int]) -> torch.Tensor | None:
    """Matrices ``rows`` of the stack ``t`` (L, *, *): ``t`` itself, a view when they are
    adjacent, else a copy."""
    if t is None or len(rows) == t.shape[0]:
        return t
    if rows == list(range(rows[0], rows[0] + len(rows))):
        return t[rows[0]:rows[0] + len(rows)]
    return t.index_select(0, torch.tensor(rows, device=t.device))


def _check_shapes(shapes: object) -> tuple[str, ...]:
    if not isinstance(shapes, Mapping) or not shapes:
        raise ValueError(f"shapes(={shapes!r}) must be a non-empty mapping module name -> (m, n)")
    for name, shape in shapes.items():
        if not isinstance(name, str):
            raise TypeError(f"shapes has a module name {name!r} that is not a str")
        if (not isinstance(shape, (tuple, list)) or len(shape) != 2
                or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in shape)):
            raise ValueError(f"shapes[{name!r}](={shape!r}) must be (m, n), two ints >= 1")
    return tuple(shapes)


def _check_ranks(ranks: object, names: tuple[str, ...], K: int) -> dict[str, tuple[int, ...]]:
    """``ranks`` (an int, K ints, or module -> either) as module -> K ranks."""
    def per_client(where: str, r: object) -> tuple[int, ...]:
        if not isinstance(r, numbers.Integral) and isinstance(r, Sequence) and not isinstance(r, (str, bytes)):
            if len(r) != K:
                raise ValueError(f"{where}(={list(r)!r}) must give one rank per client: {K} ints")
            out = tuple(r)
        else:
            out = (r,) * K
        if any(isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1 for x in out):
            raise ValueError(f"{where}(={r!r}) must be an int >= 1 or {K} such ints")
        return tuple(int(x) for x in out)

    if isinstance(ranks, Mapping):
        missing = [name for name in names if name not in ranks]
        extra = [name for name in ranks if name not in names]
        if missing or extra:
            raise ValueError(f"ranks must have an entry for every module of shapes: missing {missing}, "
                             f"extra {extra}")
        return {name: per_client(f"ranks[{name!r}]", ranks[name]) for name in names}
    uniform = per_client("ranks", ranks)
    return {name: uniform for name in names}


def _check_upload_rank(where: str, upload_rank: object) -> int | None:
    if upload_rank is not None and (isinstance(upload_rank, bool) or not isinstance(upload_rank, numbers.Integral)
                                    or upload_rank < 0):
        raise ValueError(f"{where}'s upload_rank(={upload_rank!r}) must be None or an int >= 0")
    return upload_rank
