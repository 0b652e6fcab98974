"""``fraq aggregate`` through the round buffer: the list path's results, one client's memory, bad input first.

:func:`fraq.peft.aggregate_adapters` checks every client's config and safetensors header
first, then reads the clients one at a time into the round buffer. Checked here:

- Results equal the list path (every client read, ``capped_aggregate`` on the list, the
  report's stacks built from the uploads in float64 by :func:`fraq.stack`): ranks and
  factors bit for bit (a copy into the buffer is exact and the stacks are those of the
  list); the ``modules_to_save`` average bit for bit (the running sum runs the list's
  operations); the rows' energy and error bit for bit in float64 (the buffer's stacks, or
  a flat method's uploads, weighted as :func:`fraq.stack` weights them), in float32 within
  the stored stacks' rounding (below); the certificate's verdict, with both bounds above the true error
  against an independent float64 dense aggregate.
- Peak tensor memory (:func:`benchmarks.measure.peak_memory`, torch's own allocation
  count, one thread; nothing here is a time) of a whole aggregate:

      peak <= stacks + one client + finish + small,

  stacks the buffer's storage; one client its file's tensors, its factors in the compute
  dtype, and the running sum's three float64 copies of its ``modules_to_save`` tensors
  (the sum, the new term, the new sum); finish the measured peak of aggregating the
  filled buffer alone (the method, the rows, the certificate, the output tensors); small
  the buffer's per-block weight vectors, (L + 2) R float64 entries a block, and client
  0's non-floating tensors. A server that kept every client would exceed it by K - 1
  clients; the list path must peak above the buffer and at least K clients' files.

Rows from float32 stacks: the buffer's weighted stacks X', Y' are the exact stacks to
w = 1.01 * 8 u32 N_S (:mod:`fraq.aggregators.certificate`, "Stored stacks"; N_S the sum of
the stack's rank-1 terms' norm products), so ||Delta' - Delta||_F <= w and the relative
error moves by at most 2 w / ||Delta|| (numerator and denominator each by w, w <<
||Delta||), the energy by at most 3 (2 w / ||Delta||) relative; the float64 evaluation adds
sqrt(c u64) N_S / ||Delta||, c = m + n + (R + p)^2 (the squared difference's resolution).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from benchmarks.measure import peak_memory
from fraq import stack
from fraq.aggregators import ClientUpdate, Downlink, Factors, get_aggregator
from fraq.aggregators.capping import capped_aggregate
from fraq.aggregators.certificate import ExactFactors
from fraq.peft import aggregate_adapters
from fraq.peft.aggregate import AggregateOptions, _finish, _read_round
from fraq.peft.reader import read_adapter, read_header
from fraq.peft.report import module_row
from fraq._stack import normalized_weights

PREFIX = "base_model.model."
SHAPES = {f"layers.{i}.{n}": s for i in range(4) for n, s in (("q", (96, 64)), ("o", (64, 128)))}
HEAD, IDS = PREFIX + "score.modules_to_save.weight", PREFIX + "score.modules_to_save.ids"
K = 5
WEIGHTS = [3.0, 1.0, 4.0, 1.0, 5.0]
EPS32, EPS64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps


def _rank(k: int, module: str) -> int:
    return 3 if module == "layers.0.q" else 2 + k  # the pattern: layers.0.q sums to 15, the others to 20


def _scale(k: int, module: str) -> float:
    r, alpha = _rank(k, module), 2.0 + k
    return alpha / math.sqrt(r) if k % 2 else alpha / r


def _write_clients(root: Path) -> list[Path]:
    """K peft adapter directories written by hand: per-client ranks, a rank_pattern, rsLoRA
    on odd clients, a float head and an integer buffer in modules_to_save."""
    dirs = []
    for k in range(K):
        g = torch.Generator().manual_seed(100 + k)
        tensors = {}
        for name, (m, n) in SHAPES.items():
            r = _rank(k, name)
            tensors[f"{PREFIX}{name}.lora_A.weight"] = torch.randn(r, n, generator=g)
            tensors[f"{PREFIX}{name}.lora_B.weight"] = torch.randn(m, r, generator=g) / (1 + k)
        tensors[HEAD] = torch.randn(3, 64, generator=g)
        tensors[IDS] = torch.arange(7)
        d = root / f"c{k}"
        d.mkdir()
        save_file(tensors, str(d / "adapter_model.safetensors"), metadata={"format": "pt"})
        cfg = {"peft_type": "LORA", "r": 2 + k, "lora_alpha": 2.0 + k, "use_rslora": bool(k % 2),
               "rank_pattern": {"layers.0.q": 3}, "target_modules": ["q", "o"], "modules_to_save": ["score"],
               "base_model_name_or_path": "tiny"}
        (d / "adapter_config.json").write_text(json.dumps(cfg), encoding="utf-8")
        dirs.append(d)
    return dirs


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return _write_clients(tmp_path_factory.mktemp("clients"))


def _list_path(dirs, method, options, cdt, certificate="gram"):
    """Every client read at once, as a server that keeps them: the result, the written
    factors, the rows' stacks (float64, :func:`fraq.stack`) and the certificate."""
    a = normalized_weights(WEIGHTS, K)
    clients = [read_adapter(d) for d in dirs]
    updates = [ClientUpdate({m: (B.to(cdt), A.to(cdt)) for m, (B, A) in c.factors.items()}, scale=c.scales,
                            weight=ak) for c, ak in zip(clients, a)]
    result = capped_aggregate(get_aggregator(method, **options), updates)
    factors = {}
    for m in result.modules:  # the largest downlink (FlexLoRA's truncation at the largest client rank)
        d = max((down[m] for down in result.downlinks),
                key=lambda d: sum(f.rank for f in d.merge) + (d.start.rank if d.start else 0))
        terms = list(d.merge) + ([d.start] if d.start is not None else [])
        factors[m] = (torch.cat([f.B.to(cdt) * f.scale for f in terms], -1), torch.cat([f.A.to(cdt) for f in terms]))
    stacks = {m: stack([c.factors[m][0].double() for c in clients], [c.factors[m][1].double() for c in clients], a,
                       [c.scales[m] for c in clients]) for m in SHAPES}
    downs = {m: Downlink(sent=f, merge=(Factors(*f),)) for m, f in factors.items()}
    cert = replace(result, downlinks=(downs,) * K).certificate(updates, method=certificate) if certificate else None
    full = sum(ak * c.full[HEAD].double() for c, ak in zip(clients, a))
    return result, factors, stacks, cert, full


def _exact(dirs, module):
    """sum_k a_k s_k B_k A_k in float64, dense, from the files; and N_S."""
    a = normalized_weights(WEIGHTS, K)
    delta, ns = 0, 0.0
    for k, d in enumerate(dirs):
        c = read_adapter(d)
        B, A = (t.double() for t in c.factors[module])
        s = _scale(k, module)
        delta = delta + a[k] * s * (B @ A)
        ns += sum(float(torch.linalg.norm(math.sqrt(a[k]) * B[:, i]) * torch.linalg.norm(math.sqrt(a[k]) * s * A[i]))
                  for i in range(B.shape[1]))
    return delta, ns


CASES = [("fraq", {"tau": 0.9}, torch.float64), ("fraq", {"tau": 1.0}, torch.float32),
         ("fraq", {"rank": 16}, torch.float64),  # caps 15 (layers.0.q) and 16: a SplitRound
         ("flora", {}, torch.float64), ("flexlora", {}, torch.float64)]  # flexlora: flat uploads, no stacks


@pytest.mark.parametrize("method,options,cdt", CASES)
def test_the_buffer_gives_the_list_paths_ranks_factors_rows_average_and_verdict(dirs, method, options, cdt):
    got = aggregate_adapters(dirs, None, weights=WEIGHTS, method=method, dtype=cdt, compute_dtype=cdt, **options)
    result, factors, stacks, cert, full = _list_path(dirs, method, options, cdt)
    assert got.ranks == {m: max(r) if isinstance(r, tuple) else r for m, r in result.ranks.items()}
    assert torch.equal(got.full[HEAD], full.to(cdt)) and torch.equal(got.full[IDS], torch.arange(7))
    for row in got.rows:
        m = row.module
        B, A = got.factors[m]
        assert torch.equal(B, factors[m][0]) and torch.equal(A, factors[m][1]), m
        assert row.client_ranks == tuple(_rank(k, m) for k in range(K))
        listed = module_row(m, row.client_ranks, ExactFactors(*stacks[m]), B, A)
        delta, ns = _exact(dirs, m)
        norm = float(torch.linalg.norm(delta))
        true = float(torch.linalg.norm(B.double() @ A.double() - delta)) / norm
        if cdt == torch.float64:
            assert (row.energy, row.rel_error) == (listed.energy, listed.rel_error), m
        else:
            c = sum(SHAPES[m]) + (sum(row.client_ranks) + row.rank) ** 2
            w = 0.0 if cdt == torch.float64 else 1.01 * 8 * (EPS32 / 2) * ns
            tol = 2 * w / norm + math.sqrt(c * EPS64 / 2) * ns / norm
            assert abs(row.rel_error - listed.rel_error) <= tol, (m, row.rel_error, listed.rel_error, tol)
            assert abs(row.energy - listed.energy) <= 3 * tol * listed.energy, (m, row.energy, listed.energy)
        mine, theirs = got.certificate[m], cert[m]
        assert mine.at_rounding_level == theirs.at_rounding_level, (m, mine, theirs)
        assert true <= mine.bound and true <= theirs.bound, (m, true, mine.bound, theirs.bound)


def _factor_tensors(c) -> dict[str, torch.Tensor]:
    return {f"{PREFIX}{m}.lora_{w}.weight": t for m, (B, A) in c.factors.items() for w, t in (("B", B), ("A", A))}


def _bytes(tensors) -> int:
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def test_aggregate_peaks_at_stacks_one_client_and_the_finish(dirs):
    opts = AggregateOptions(weights=WEIGHTS, tau=0.9)
    run = lambda: aggregate_adapters(dirs, None, weights=WEIGHTS, tau=0.9)  # noqa: E731
    listed = lambda: _list_path(dirs, "fraq", {"tau": 0.9}, torch.float64)  # noqa: E731
    run(), listed()  # warm-up: lazily built constants stay out of the peaks
    whole, everyone = peak_memory(run), peak_memory(listed)

    headers = [read_header(d) for d in dirs]
    a = normalized_weights(WEIGHTS, K)
    buf, full = _read_round(headers, a, opts)
    held = {}
    finish = peak_memory(lambda: held.setdefault("out", _finish(buf, full, headers, a, opts, None)))
    stacks = _bytes(buf.storage)
    files = [_bytes(read_adapter(d).factors[m][i] for m in SHAPES for i in (0, 1)) + 3 * 64 * 4 + 7 * 8
             for d in dirs]
    one = max(f + 2 * (f - 3 * 64 * 4 - 7 * 8) + 3 * 3 * 64 * 8 for f in files)  # file, its float64 factors, sums
    blocks = {}  # (shape, every client's rank) -> modules: the buffer's blocks
    for m, shape in SHAPES.items():
        blocks.setdefault((shape, tuple(_rank(k, m) for k in range(K))), []).append(m)
    small = sum((len(mods) + 2) * sum(ranks) * 8 for (_, ranks), mods in blocks.items()) + 7 * 8

    assert stacks == sum((m + n) * sum(_rank(k, name) for k in range(K)) * 8 for name, (m, n) in SHAPES.items())
    assert whole.peak <= stacks + one + finish.peak + small, (whole.peak, stacks, one, finish.peak, small)
    assert everyone.peak > whole.peak, (everyone.peak, whole.peak)
    assert everyone.peak >= sum(files)  # every client's file is alive at once on the list path


def test_a_bad_last_client_is_refused_before_any_tensor_is_read(dirs, tmp_path, monkeypatch):
    import shutil

    import fraq.peft.aggregate as mod

    bad = tmp_path / "bad"
    shutil.copytree(dirs[-1], bad)
    c = read_adapter(bad)
    tensors = _factor_tensors(c)
    tensors[f"{PREFIX}layers.3.o.lora_A.weight"] = torch.zeros(c.factors["layers.3.o"][1].shape[0], 100)
    tensors.update(c.full)
    save_file(tensors, str(bad / "adapter_model.safetensors"))
    reads = []
    monkeypatch.setattr(mod, "read_adapter", lambda *args: reads.append(args) or read_adapter(*args))
    with pytest.raises(ValueError, match=r"bad/adapter_model.safetensors: module 'layers.3.o' is linear "
                                         r"\(m, n\)=\(64, 100\) but linear \(64, 128\)"):
        aggregate_adapters([*dirs[:-1], bad], tmp_path / "out", weights=WEIGHTS)
    assert reads == [] and not (tmp_path / "out").exists()


def test_a_client_changed_after_the_check_is_refused_and_nothing_is_written(dirs, tmp_path, monkeypatch):
    import shutil

    import fraq.peft.aggregate as mod

    copies = [tmp_path / f"c{k}" for k in range(K)]
    for d, c in zip(dirs, copies):
        shutil.copytree(d, c)

    def changing(path, header):  # the last client's head changes shape while the first client is read
        c = read_adapter(copies[-1])
        tensors = {**_factor_tensors(c), HEAD: torch.zeros(4, 64), IDS: c.full[IDS]}
        save_file(tensors, str(copies[-1] / "adapter_model.safetensors"))
        return read_adapter(path, header)

    monkeypatch.setattr(mod, "read_adapter", changing)
    with pytest.raises(ValueError, match=r"c4/adapter_model.safetensors: changed since it was checked"):
        aggregate_adapters(copies, tmp_path / "out", weights=WEIGHTS)
    assert not (tmp_path / "out").exists()
