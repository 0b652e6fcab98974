"""Tables 1-3's downlink and exactness columns on trained adapters: one federated round's uploads.

The synthetic presets (:mod:`benchmarks.experiments.tables123`) give every method LoRA-like
spectra; this experiment gives them what clients really upload: round 1 of the federated
harness on BANKING77 (Casanueva et al., 2020, arXiv:2003.04807; CC BY 4.0), all-MiniLM-L6-v2
with LoRA rank 8 on q/k/v of its last layer, 10 clients on a Dirichlet(0.1) label partition,
seed 0 (the ``banking77`` setting, one round), saved by the harness
(``federated.save_adapters_round=1``, :func:`fraq.federated.adapters.save_client_adapters`)
into :data:`UPLOADS`, one file per method whose clients train differently
(``<registry name>.safetensors``: :data:`PRODUCE`, then :func:`collect`).

Every row of Tables 1-3 (:func:`benchmarks.experiments.table_rows.table_rows` on a preset of
the uploads' shapes and ranks) aggregates the uploads its own method's clients sent: FLoRA's
file for the methods whose round 1 the harness trains once for all of them
(:data:`ROUND1_SHARED`, :mod:`fraq.federated.round1`: the same inputs, so the same bits),
its own file for the others; a row whose method's uploads were not saved, or whose round
is not round 1 (LoRA-A²'s A round trains on round 1's aggregate), is recorded as skipped,
with the reason. Per row: the downlink (parameters per client, mean and largest, and as a
percentage of FLoRA's), the ranks, and the exactness ``||S - G||_F / ||S||_F`` per module,
the largest over clients: S the exact weighted aggregate computed here in float64 from the
uploads alone (:func:`exact_aggregate`; for FLoRG's single matrices the square core it
certifies, sum_k a_k s_k A_k^T A_k), G what a client's weights change by
(:meth:`fraq.aggregators.payload.Downlink.delta`, in float64). Dense m x n matrices: these
modules are 384 x 384. Untimed: counts and errors, the same on any machine at one thread.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import torch

from benchmarks.experiments import Experiment

EXPERIMENT = Experiment(default=True, untimed=True)

__all__ = ["PRODUCE", "ROUND1_SHARED", "UPLOADS", "collect", "exact_aggregate", "key", "measure", "points", "row_file"]

UPLOADS = Path(__file__).resolve().parents[1] / "data" / "banking77-round1"
"""The committed uploads: ``<registry name>.safetensors`` per method whose clients train
differently, and a README saying how they were produced."""

PRODUCE = ("python -m fraq.federated --config banking77 --data-dir DIR --rounds 1 --methods flora lora-a2 florg "
           "--seeds 0 --variants dir0.1 --set federated.save_adapters_round=1 --set federated.head_rounds=1 "
           "--out OUT --overwrite --no-progress && python -m benchmarks.experiments.trained OUT/adapters")
"""How :data:`UPLOADS` is produced (DIR holding the publishers' ``banking77/``, or ``FRAQ_DATA``):
about 3 minutes on a 2-core CPU, most of it encoding the data once; round 1 only, so
``head_rounds`` is 1."""

ROUND1_SHARED = ("flora", "fedex-lora", "fedit", "flexlora", "florist", "fraq")
"""Methods whose round 1 the harness trains once, from the same start on the same data
(:mod:`fraq.federated.round1`): FLoRA's saved round is each of theirs, bit for bit."""


def points(size: str) -> list[dict]:
    """One point at every size: the committed uploads are one round, whatever the size."""
    return [dict(uploads="banking77-round1", round=1)]


def cost(config: dict) -> float:
    """About 2 s: every row's aggregation of 3 modules x 10 clients and a dense float64 check."""
    return 2.0


def key(config: dict) -> str:
    return config["uploads"]


def row_file(name: str, folder: Path | None = None) -> Path | None:
    """The saved round a row of method ``name`` aggregates, in ``folder`` (default
    :data:`UPLOADS`): its own method's file, else FLoRA's for a method of
    :data:`ROUND1_SHARED`; None when neither is there."""
    folder = UPLOADS if folder is None else folder
    own = folder / f"{name}.safetensors"
    if own.is_file():
        return own
    shared = folder / "flora.safetensors"
    return shared if name in ROUND1_SHARED and shared.is_file() else None


def exact_aggregate(updates, module: str) -> torch.Tensor:
    """The exact weighted aggregate of ``module``'s uploads in float64, formed densely:
    sum_k a_k s_k B_k A_k with a_k = n_k / sum_j n_j; for single-matrix uploads (FLoRG's
    (None, A_k)) the square core sum_k a_k s_k A_k^T A_k."""
    w = torch.tensor([float(u.weight) for u in updates], dtype=torch.float64)
    a = w / w.sum()
    total = None
    for k, u in enumerate(updates):
        B, A = u.factors[module]
        A = A.double()
        term = A.mT @ A if B is None else B.double() @ A
        term = float(a[k]) * float(u.scale_of(module)) * term
        total = term if total is None else total + term
    return total


def _delta(down) -> torch.Tensor:
    """What a client's weights change by, float64: :meth:`Downlink.delta`, or for FLoRG's
    single matrices the certified core, sum over terms of scale A^T A."""
    terms = list(down.merge) + ([down.start] if down.start is not None else [])
    if terms and terms[0].B is None:
        return sum(f.scale * (f.A.double().mT @ f.A.double()) for f in terms)
    return down.delta(torch.float64)


def _preset(data):
    """A preset of the uploads' shapes, client ranks and alphas, for the table's rows."""
    from fraq.presets import ModuleGroup, Preset

    ranks = tuple(data.ranks(data.modules[0]))
    alphas = tuple(float(x) for x in data.meta.get("alphas") or [s * r for s, r in
                                                                  zip(data.scales(data.modules[0]), ranks)])
    shapes = {}
    for name in data.modules:
        B, A = data.updates[0].factors[name]
        shapes.setdefault((int(B.shape[0]), int(A.shape[-1])), []).append(name.rsplit(".", 1)[-1])
    groups = tuple(ModuleGroup(names[0], m, n, count=len(names)) for (m, n), names in shapes.items())
    return Preset("banking77-round1", groups, ranks=ranks, alphas=alphas)


def measure(config: dict, device: torch.device | str = "cpu") -> dict:
    """Every row's downlink and exactness on the saved round (module docstring). Counting
    and float64 checks: it runs on the CPU whatever ``device``."""
    from benchmarks.experiments.table_rows import row_aggregator, row_fields, table_rows
    from fraq.federated.adapters import load_client_adapters

    shared = load_client_adapters(UPLOADS / "flora.safetensors")
    preset = _preset(shared)
    flora = sum((int(B.shape[0]) + int(A.shape[-1])) * sum(shared.ranks(n))
                for n, (B, A) in shared.updates[0].factors.items())
    rows = []
    for method in table_rows(preset):
        base = {"method": method.label, "spec": str(method), "name": method.name, **row_fields(method)}
        path = row_file(method.name)
        rnd = method.options.get("round", 1)
        if path is None or rnd != config["round"]:
            why = (f"its clients' round {rnd} trains on round {config['round']}'s aggregate; only round "
                   f"{config['round']} is saved") if path is not None else \
                f"no saved round of {method.name}'s own clients in {UPLOADS.name}/"
            rows.append(dict(base, skipped=why))
            continue
        data = shared if path.name == "flora.safetensors" else load_client_adapters(path)
        agg = row_aggregator(method)
        try:
            res = agg.aggregate(data.updates)
        except ValueError as exc:
            rows.append(dict(base, skipped=f"refused by the aggregator: {exc}"))
            continue
        per_client = res.downlink_params()
        errors = {}
        for name in data.modules:
            S = exact_aggregate(data.updates, name)
            norm = float(torch.linalg.matrix_norm(S))
            errors[name] = max(float(torch.linalg.matrix_norm(S - _delta(d[name]))) / norm for d in res.downlinks)
        worst = max(errors, key=errors.get)
        rows.append(dict(base, uploads=path.name, clients=len(data.updates),
                         downlink_params=statistics.mean(per_client), downlink_params_max=max(per_client),
                         flora_params=flora, downlink_pct=100.0 * statistics.mean(per_client) / flora,
                         ranks={n: list(r) if isinstance(r, tuple) else int(r) for n, r in res.ranks.items()},
                         exactness=errors, exactness_max=errors[worst], exactness_module=worst))
    return {"uploads": config["uploads"], "data": "BANKING77 (Casanueva et al., 2020, arXiv:2003.04807; CC BY 4.0)",
            "meta": {k: v for k, v in shared.meta.items() if k != "alphas"}, "modules": list(shared.modules),
            "clients": len(shared.updates), "client_ranks": list(preset.ranks), "rows": rows}


def collect(adapters: Path, out: Path = UPLOADS) -> list[Path]:
    """Copy a harness run's saved rounds (``OUT/adapters/*_round1.safetensors``, one per
    method) into ``out`` as ``<registry name>.safetensors`` (the method recorded in each
    file), each written beside and renamed into place; returns the files written."""
    from fraq.internals import replacing_file
    from fraq.federated.adapters import load_client_adapters
    from fraq.methods import MethodSpec

    files = sorted(Path(adapters).glob("*_round1.safetensors"))
    if not files:
        raise FileNotFoundError(f"adapters(={str(adapters)!r}) holds no *_round1.safetensors")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for f in files:
        meta = load_client_adapters(f).meta
        if meta.get("round") != 1:
            raise ValueError(f"{f} holds round {meta.get('round')!r}, not round 1")
        target = out / f"{MethodSpec.parse(meta['method']).name}.safetensors"
        with replacing_file(target) as tmp:
            shutil.copyfile(f, tmp)
        written.append(target)
    return written


if __name__ == "__main__":  # python -m benchmarks.experiments.trained ADAPTERS_DIR
    import sys

    if len(sys.argv) != 2:
        print("usage: python -m benchmarks.experiments.trained ADAPTERS_DIR (a harness run's OUT/adapters)",
              file=sys.stderr)
        sys.exit(2)
    for p in collect(Path(sys.argv[1])):
        print(f"wrote {p}")
