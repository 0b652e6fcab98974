"""A method's per-round record, its log line and its result dict, built here once.

The in-process harness (:func:`fraq.federated.round_loop.run_round`) and the Flower strategy
(:class:`fraq.federated.flower.strategy.LoraStrategy`) both turn a round's
:class:`~fraq.aggregators.AggregationResult` into a record with :func:`round_record`, so
``result.json`` has the same keys whichever runtime wrote it:

``round``, ``accuracy`` (None when the round was not evaluated), ``train_loss`` (mean over
clients), ``train_seconds``, ``agg_ms``, ``downlink_params`` (per client),
``downlink_params_mean``, ``downlink_pct_flora`` (of FLoRA's (m + n) sum_k r_k per
module), ``ranks`` (module -> global rank, or per-client ranks), ``rank_mean``,
``reinitialize`` (clients start the next round from a fresh adapter), ``info`` (the
aggregator's extras) and ``certificate`` (the worst module's exactness certificate,
:meth:`fraq.aggregators.Certificate.summary`: ``certificate_error``,
``certificate_bound``, ``certificate_rounding_level``, ``certificate_module``; computed
after ``agg_ms`` is taken, so it is no part of it; None when not computed).
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from fraq.aggregators import REINITIALIZE, AggregationResult, Certificate
from fraq.methods import MethodSpec

__all__ = ["flora_downlink", "jsonable", "method_result", "rank_mean", "round_line", "round_record"]


def jsonable(x):
    """``x`` with tensors, numpy scalars, tuples and method specs (their text) turned into JSON
    types (dict keys as str)."""
    if isinstance(x, MethodSpec):
        return str(x)
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    return x


def flora_downlink(targets: dict[str, tuple[int, int]], ranks: list[int]) -> int:
    """FLoRA's per-client downlink, (m + n) sum_k r_k over modules: the 100% of the tables."""
    return sum((m + n) * sum(ranks) for m, n in targets.values())


def rank_mean(ranks: dict) -> float:
    """Mean over modules of the global rank (a per-client list counts as its mean)."""
    vals = [statistics.fmean(r) if isinstance(r, (list, tuple)) else r for r in ranks.values()]
    return float(statistics.fmean(vals))


def round_record(result: AggregationResult, *, t: int, losses: list[float], train_seconds: float | None,
                 agg_ms: float, targets: dict[str, tuple[int, int]], client_ranks: list[int],
                 accuracy: float | None = None, certificate: Certificate | None = None) -> dict:
    """The record of round ``t`` (the keys are listed in the module docstring).

    ``targets``: adapted module -> (m, n); ``client_ranks``: the clients' LoRA ranks, for
    the FLoRA downlink reference; ``certificate``: the round's ``result.certificate(updates)``.
    """
    down = result.downlink_params()
    ref = flora_downlink(targets, list(client_ranks))
    return {"round": int(t), "accuracy": accuracy, "train_loss": float(np.mean(losses)),
            "train_seconds": train_seconds, "agg_ms": agg_ms, "downlink_params": down,
            "downlink_params_mean": float(np.mean(down)), "downlink_pct_flora": 100.0 * float(np.mean(down)) / ref,
            "ranks": jsonable(result.ranks), "rank_mean": rank_mean(result.ranks),
            "reinitialize": result.client_init == REINITIALIZE, "info": jsonable(result.info),
            "certificate": None if certificate is None else certificate.summary()}


def round_line(spec: str, t: int, R: int, rec: dict) -> str:
    """One round's log line: loss, accuracy (when evaluated), downlink, rank, aggregation and training time."""
    acc = rec.get("accuracy")
    train = rec.get("train_seconds")
    return (f"[{spec}] round {t}/{R}: loss {rec['train_loss']:.3f}"
            + (f", accuracy {100 * acc:.2f}%" if acc is not None else "")
            + f", downlink {rec['downlink_pct_flora']:.1f}% of FLoRA, mean rank {rec['rank_mean']:.1f}, "
              f"aggregation {rec['agg_ms']:.1f} ms"
            + ("" if train is None else ", round 1 trained once with an earlier method" if rec.get("train_shared")
               else f", training {train:.1f} s"))


def method_result(task, method, records: list[dict]) -> dict:
    """A method's result dict (``result.json``): its client plan, the FLoRA downlink reference, the rounds.

    ``task`` is a :class:`~fraq.federated.round_loop.Task`, ``method`` a
    :class:`~fraq.federated.round_loop.MethodSetup`.
    """
    plan = method.plan
    return {"method": str(method.spec), "label": method.label, "display_name": method.display_name, "skipped": None,
            "ranks": plan.ranks, "alphas": plan.alphas,
            "upload_ranks": plan.upload_ranks,
            "flora_downlink_params": flora_downlink(task.backbone.targets, list(method.client_ranks)),
            "rounds": records}
