"""The one registry of problem instances every suite measures: seeded, cached, on the CPU.

Every input the asv suite, the pytest-benchmark checks, the runner (``python -m
benchmarks.run``), the experiments and the demo use is built here and nowhere else:

- :func:`clients` / :func:`stacks`: K LoRA-like clients' factors for a batch of
  equal-shape modules (:func:`fraq.synthetic.lora_clients`: decaying spectra, partly
  shared subspaces), and their exact weighted stacks;
- :func:`preset_clients` / :func:`preset_stacks`: every module group of a model preset
  (:data:`fraq.presets.PRESETS`), optionally the first ``layers`` layers only;
- :func:`sweep_ranks`: clients adding up to the Fig. 3 sweeps' total rank r;
- :class:`Model` / :func:`build_model`: a preset's uploads as per-module client updates
  (Tables 1-3, Fig. 1), and :func:`lora_a2_inputs`: LoRA-A^2's rounds on them;
- :func:`conditioned`: aggregates with a prescribed spectrum, condition numbers 1 to
  1e10 (Fig. 4 right, the backends' and the precision experiments' accuracy cases);
- :func:`duplicated`: every client twice, so the stack is rank-deficient;
- :func:`fidelity_modules`: Fig. 4 left's modules, or the saved real client adapters of
  a federated round when ``FRAQ_ADAPTERS`` names one.

Generating inputs takes far longer than aggregating them (70 s for the heterogeneous
LLaMA preset), and asv runs every benchmark in a fresh process, so :func:`clients` is
cached twice: on disk under ``FRAQ_BENCH_CACHE`` (default ``.asv/cache``, git-ignored),
keyed by the arguments and a digest of the generator's source (an entry stores its
arguments and is checked against them and its tensors' shapes before use), and in memory
per process. Every commit the regression workflow measures therefore sees the same inputs,
unless ``fraq/synthetic.py`` itself changed. A damaged cache entry is rebuilt (with a
warning naming it), and a cache directory that cannot be written is replaced by a
temporary one (:func:`cache_dir`, with a warning). Tensors are built on the CPU; a suite moves
them to its device (:mod:`benchmarks.device`). The sizes at which they are built are
:mod:`benchmarks.sizes`'.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import os
import sys
import tempfile
from dataclasses import dataclass

import torch

DTYPE = torch.float32

def env_threads(name: str = "FRAQ_BENCH_THREADS") -> int:
    """The positive thread count in the environment variable ``name`` (unset or empty: 1).
    A bad value stops the program with one line naming the variable and its value (at
    import, so every tool that reads it refuses it before any work)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return 1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SystemExit(f"error: {name}(={raw!r}) must be a positive integer, e.g. {name}=1")
    return value


THREADS = env_threads()
"""Torch threads of every suite (``FRAQ_BENCH_THREADS``, default 1): on a shared 2-core
machine 2-thread LAPACK calls slow down erratically, which would read as a regression."""

TAU = 0.95
"""Energy threshold of the preset benchmarks (the paper's main setting)."""

PRESET_NAMES = ("roberta-base", "llama-3.2-3b", "llama-3.2-3b-hetero")

FIDELITY_SEED = 100
"""Seed of Fig. 4 left's synthetic modules (:func:`fidelity_modules`)."""

CACHE_DIR = os.environ.get("FRAQ_BENCH_CACHE") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".asv", "cache")


def check_threads() -> None:
    """Set torch to :data:`THREADS` threads: every ``setup`` and ``setup_cache`` calls this
    first (importing the suite changes nothing, so tests can import it)."""
    if torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)


def _say(message: str) -> None:
    print(f"benchmarks: warning: {message}", file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=1)
def cache_dir() -> str:
    """:data:`CACHE_DIR`, created, when it can be written; else a temporary cache shared by
    this user's processes (``$TMPDIR/fraq-bench-cache-<uid>``), with a warning naming both."""
    try:
        os.makedirs(CACHE_DIR, exist_ok=True)
        if os.access(CACHE_DIR, os.W_OK | os.X_OK):
            return CACHE_DIR
        reason = "is not writable"
    except OSError as e:
        reason = f"cannot be created ({e.strerror})"
    fallback = os.path.join(tempfile.gettempdir(), f"fraq-bench-cache-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(fallback, exist_ok=True)
    _say(f"the benchmark input cache {CACHE_DIR} (FRAQ_BENCH_CACHE) {reason}; caching in {fallback} instead")
    return fallback


@functools.lru_cache(maxsize=1)
def _generator_digest() -> str:
    import fraq.synthetic

    return hashlib.sha1(inspect.getsource(fraq.synthetic).encode()).hexdigest()[:12]


def _disk_cached(tag: str, key: dict, build, mismatch):
    """``build()`` saved to (and later loaded from) <cache>/<tag>-<digest>.pt (:func:`cache_dir`),
    stored beside ``key`` (the arguments it was built from).

    An entry is used only when its stored key equals ``key`` and ``mismatch(value)`` finds
    nothing wrong with its tensors (it returns a reason, or None): an entry built from other
    arguments (a file copied or renamed by hand, a tag that two keys share) would otherwise
    be measured as if it were this one's inputs. An entry that cannot be read (truncated by
    a killed writer, damaged, unreadable) or does not match is rebuilt and replaced, with a
    warning naming it; an entry that cannot be written only costs the rebuild next time,
    also with a warning."""
    path = os.path.join(cache_dir(), f"{tag}-{_generator_digest()}.pt")
    if os.path.exists(path):
        try:
            entry = torch.load(path)
        except Exception as e:  # noqa: BLE001 (any damage: zip, pickle, EOF, permission errors)
            detail = (str(e).strip().splitlines() or [""])[0][:120]
            _say(f"the cached benchmark input {path} cannot be read ({type(e).__name__}: {detail}); rebuilding it")
        else:
            stored = entry.get("key") if isinstance(entry, dict) else None
            reason = (f"it was built for {stored}, not {key}" if stored != key
                      else mismatch(entry.get("value")))
            if reason is None:
                return entry["value"]
            _say(f"the cached benchmark input {path} does not match its key ({reason}); rebuilding it")
    obj = build()
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        torch.save({"key": key, "value": obj}, tmp)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    except (OSError, RuntimeError) as e:
        _say(f"the benchmark input {path} could not be cached ({type(e).__name__}: {e}); going on without it")
        if os.path.exists(tmp):
            os.unlink(tmp)
    return obj


def _clients_mismatch(value, m: int, n: int, ranks: tuple[int, ...], batch: int) -> str | None:
    """Why ``value`` is not (Bs, As) of ``ranks`` clients' (batch, m, r_k) and (batch, r_k, n)
    factors in :data:`DTYPE`, or None when it is."""
    try:
        Bs, As = value
        if len(Bs) != len(ranks) or len(As) != len(ranks):
            return f"{len(Bs)} clients, not {len(ranks)}"
        for k, (B, A, r) in enumerate(zip(Bs, As, ranks)):
            if tuple(B.shape) != (batch, m, r) or tuple(A.shape) != (batch, r, n):
                return f"client {k}'s factors are {tuple(B.shape)} and {tuple(A.shape)}, not {(batch, m, r)} and " \
                       f"{(batch, r, n)}"
            if B.dtype != DTYPE or A.dtype != DTYPE:
                return f"client {k}'s factors are {B.dtype}, not {DTYPE}"
    except (TypeError, ValueError, AttributeError) as e:
        return f"not a pair of factor lists ({type(e).__name__})"
    return None


@functools.lru_cache(maxsize=4)
def clients(m: int, n: int, ranks: tuple[int, ...], batch: int, seed: int = 0) -> tuple[tuple, tuple]:
    """K clients' factors for ``batch`` modules of shape m x n: (Bs, As) tuples of
    (batch, m, r_k) and (batch, r_k, n) tensors in :data:`DTYPE`."""
    from fraq.synthetic import lora_clients

    def build():
        Bs, As = lora_clients(m, n, list(ranks), batch=(batch,), seed=seed, dtype=DTYPE)
        return list(Bs), list(As)

    tag = f"clients-{m}x{n}-r{'_'.join(map(str, ranks))}-b{batch}-s{seed}"
    if len(tag) > 120:
        tag = f"clients-{m}x{n}-{hashlib.sha1(tag.encode()).hexdigest()[:12]}-b{batch}-s{seed}"
    key = dict(m=m, n=n, ranks=list(ranks), batch=batch, seed=seed, dtype=str(DTYPE))
    Bs, As = _disk_cached(tag, key, build, lambda v: _clients_mismatch(v, m, n, ranks, batch))
    return tuple(Bs), tuple(As)


@functools.lru_cache(maxsize=4)
def stacks(m: int, n: int, ranks: tuple[int, ...], batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact weighted stacks (uniform weights) of :func:`clients`."""
    import fraq

    Bs, As = clients(m, n, ranks, batch, seed)
    return fraq.stack(list(Bs), list(As))


def clear_caches() -> None:
    """Drop the in-memory caches (the disk cache stays), e.g. between sweep points."""
    clients.cache_clear()
    stacks.cache_clear()
    preset_clients.cache_clear()


def sweep_ranks(r: int, client_rank: int = 8) -> tuple[int, ...]:
    """Clients of rank ``client_rank`` adding up to r (a last smaller client when it does not divide r)."""
    ranks = [client_rank] * (r // client_rank)
    if r % client_rank:
        ranks.append(r % client_rank)
    return tuple(ranks)


@functools.lru_cache(maxsize=1)
def preset_clients(preset, seed: int = 0, layers: int | None = None) -> list[tuple[object, tuple, tuple]]:
    """Per module group of ``preset`` (a :class:`fraq.presets.Preset` or its name): (group,
    Bs, As), Bs[k] of shape (count, m, r_k), group i seeded ``seed + i``; ``layers``: only
    the first ``layers`` layers of each group."""
    from fraq.presets import get_preset

    preset = get_preset(preset) if isinstance(preset, str) else preset
    out = []
    for i, g in enumerate(preset.groups):
        count = g.count if layers is None else min(layers, g.count)
        out.append((g, *clients(g.m, g.n, tuple(preset.ranks), count, seed + i)))
    return out


def preset_stacks(name: str, seed: int = 0, layers: int | None = None) -> list[tuple[object, torch.Tensor, torch.Tensor]]:
    """Per module group: (group, B, A), the exact stacks with the preset's LoRA scales."""
    import fraq
    from fraq.presets import get_preset

    scales = get_preset(name).scales
    return [(g, *fraq.stack(list(Bs), list(As), scales=scales)) for g, Bs, As in preset_clients(name, seed, layers)]


def conditioned(m: int, n: int, rank: int, kappa: float, *, clients: int = 1, batch: int = 1, seed: int = 11,
                dtype: torch.dtype = DTYPE) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Clients whose uniform-weight stack is a batch of rank-``rank`` aggregates with singular
    values log-spaced from 1 to 1/kappa: ``(Bs, As, S)``, S (batch, rank) the exact spectrum.

    The factors are rotated by a random orthogonal r x r matrix, so the ill-conditioning
    is not aligned with their columns; client j holds columns j*w..(j+1)*w (w = rank /
    clients), scaled by K so that K^-1 sum_j B_j A_j is the aggregate.
    """
    from fraq.synthetic import spectrum_matrix

    if rank % clients:
        raise ValueError(f"rank(={rank}) must be a multiple of clients(={clients})")
    sv = (torch.logspace(0, -math.log10(kappa), rank, dtype=torch.float64) if kappa > 1
          else torch.ones(rank, dtype=torch.float64))
    Bl, Al = [], []
    for b in range(batch):
        B, A = spectrum_matrix(m, n, sv, seed=seed + b)
        g = torch.Generator().manual_seed(seed + 1000 + b)
        mix, _ = torch.linalg.qr(torch.randn(rank, rank, generator=g, dtype=torch.float64))
        Bl.append(B @ mix)
        Al.append(mix.mT @ A)
    B, A = torch.stack(Bl), torch.stack(Al)
    w = rank // clients
    Bs = [(clients * B[..., j * w:(j + 1) * w]).to(dtype) for j in range(clients)]
    As = [A[..., j * w:(j + 1) * w, :].contiguous().to(dtype) for j in range(clients)]
    return Bs, As, sv.expand(batch, rank)


def duplicated(m: int, n: int, clients_: int, batch: int, seed: int = 7) -> tuple[list, list]:
    """``clients_`` LoRA-like clients of rank 8, each sent twice: a rank-deficient stack
    whose exact aggregate has half the stacked rank."""
    Bs, As = clients(m, n, (8,) * clients_, batch, seed)
    return list(Bs) * 2, list(As) * 2


def saved_adapters(path: str) -> list[tuple[list, list, int, int]]:
    """(Bs, As, m, n) per module shape of a saved federated round (``FRAQ_ADAPTERS``).

    The methods stack with uniform weights and unit scales, so each client's data weight
    and LoRA scale go into its factors: sqrt(K a_k) B_k and sqrt(K a_k) s_k A_k.
    """
    import fraq
    from fraq.federated.adapters import load_client_adapters

    saved = load_client_adapters(path)
    K = len(saved.updates)
    a = fraq.normalized_weights(saved.weights, K)
    out = []
    for (m, n, _ranks, scales), (Bs, As, _names) in saved.stacks(DTYPE).items():
        Bs = [b * (K * ak) ** 0.5 for b, ak in zip(Bs, a)]
        As = [x * ((K * ak) ** 0.5 * sk) for x, ak, sk in zip(As, a, scales)]
        out.append((Bs, As, m, n))
    return out


def check_environment() -> None:
    """Check ``FRAQ_ADAPTERS`` when set (a readable client-adapter file) before any work:
    ValueError naming the variable and its value. (``FRAQ_BENCH_THREADS`` is checked at
    import, ``FRAQ_BENCH_DEVICE`` by :func:`benchmarks.device.checked`; an unwritable
    ``FRAQ_BENCH_CACHE`` falls back to a temporary cache.)"""
    path = os.environ.get("FRAQ_ADAPTERS")
    if path:
        _saved_or_refused(path)


def _saved_or_refused(path: str) -> list:
    try:
        return saved_adapters(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"FRAQ_ADAPTERS(={path!r}) must name a client-adapter file of the harness "
                         f"(--set federated.save_adapters_round=T): {e}") from None


def fidelity_modules(preset: str = "llama-3.2-3b", layers: int | None = None,
                     seed: int = FIDELITY_SEED) -> list[tuple[str, list, list, int, int]]:
    """Fig. 4 left: (group, Bs, As, m, n) per module group of ``preset``, ``layers`` of each;
    with ``FRAQ_ADAPTERS`` set, the saved real client adapters instead (group = "m x n")."""
    path = os.environ.get("FRAQ_ADAPTERS")
    if path:
        return [(f"{m}x{n}", Bs, As, m, n) for Bs, As, m, n in _saved_or_refused(path)]
    return [(g.name, list(Bs), list(As), g.m, g.n) for g, Bs, As in preset_clients(preset, seed, layers)]


# ----------------------------------------------------------------------------- whole models


@dataclass
class Model:
    """A preset's synthetic uploads: per module name the clients' (B_k, A_k)."""

    preset: object
    layers: int
    shapes: dict[str, tuple[int, int]]
    factors: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]]
    weights: list[float]

    def updates(self, names=None) -> list:
        """One :class:`fraq.aggregators.ClientUpdate` per client (modules ``names``, default all)."""
        from fraq.aggregators import ClientUpdate

        names = list(self.shapes) if names is None else names
        return [ClientUpdate({n: (self.factors[n][0][k], self.factors[n][1][k]) for n in names},
                             scale=self.preset.scales[k], weight=self.weights[k]) for k in range(self.preset.clients)]

    def florg_updates(self, names=None) -> list:
        """FLoRG's single matrix per module: the LoRA-like factor on the min(m, n) side."""
        from fraq.aggregators import ClientUpdate

        names = list(self.shapes) if names is None else names
        out = []
        for k in range(self.preset.clients):
            f = {}
            for n in names:
                m_, n_ = self.shapes[n]
                B, A = self.factors[n][0][k], self.factors[n][1][k]
                f[n] = (None, A if n_ <= m_ else B.mT)
            out.append(ClientUpdate(f, scale=self.preset.scales[k], weight=self.weights[k]))
        return out

    def flora_params(self, names=None) -> int:
        names = list(self.shapes) if names is None else names
        r = sum(self.preset.ranks)
        return sum((self.shapes[n][0] + self.shapes[n][1]) * r for n in names)

    def one_per_shape(self) -> dict[tuple[int, int], tuple[str, int]]:
        """(m, n) -> (first module of that shape, number of modules of that shape in the full model)."""
        out: dict[tuple[int, int], tuple[str, int]] = {}
        for grp in self.preset.groups:
            key = (grp.m, grp.n)
            name = f"layers.0.{grp.name}"
            first, count = out.get(key, (name, 0))
            out[key] = (first, count + grp.count)
        return out


def build_model(preset, *, layers: int | None = None, seed: int = 0, device: torch.device | str = "cpu") -> Model:
    """Seeded LoRA-like factors (:func:`preset_clients`) for the first ``layers`` layers of
    every group (all by default) of ``preset`` (a :class:`fraq.presets.Preset` or its name),
    on ``device``; the clients' data sizes n_k are seeded too."""
    from fraq.presets import get_preset

    preset = get_preset(preset) if isinstance(preset, str) else preset
    g = torch.Generator().manual_seed(seed)
    weights = torch.randint(500, 5000, (preset.clients,), generator=g).tolist()  # data sizes n_k
    shapes, factors = {}, {}
    for grp, Bs, As in preset_clients(preset, seed, layers):
        Bs, As = [b.to(device) for b in Bs], [a.to(device) for a in As]
        for layer in range(Bs[0].shape[0]):
            name = f"layers.{layer}.{grp.name}"
            shapes[name] = (grp.m, grp.n)
            factors[name] = ([B[layer] for B in Bs], [A[layer] for A in As])
    return Model(preset, layers or max(g.count for g in preset.groups), shapes, factors, weights)


def lora_a2_inputs(model: Model, names, round_: int):
    """LoRA-A^2's uploads and state for a B round (1) or an A round (2)."""
    from fraq.aggregators import ClientUpdate, LoraA2State, get_aggregator

    names = list(model.shapes) if names is None else names
    ups = model.updates(names)
    A0 = {n: model.factors[n][1][0] for n in names}
    state = LoraA2State.initial({n: (torch.zeros_like(model.factors[n][0][0]), A0[n]) for n in names})
    round1 = [ClientUpdate({n: (u.factors[n][0], A0[n]) for n in names}, scale=u.scale, weight=u.weight)
              for u in ups]
    if round_ == 1:
        return round1, state
    res = get_aggregator("lora-a2").aggregate(round1, state)
    Bg = {n: res.state.adapters[n][0] for n in names}
    round2 = [ClientUpdate({n: (Bg[n], u.factors[n][1]) for n in names}, scale=u.scale, weight=u.weight)
              for u in ups]
    return round2, res.state
