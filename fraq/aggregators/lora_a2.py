"""LoRA-A^2: alternating freeze with adaptive rank selection, server side.

Koo et al., "Towards Robust and Efficient Federated Low-Rank Adaptation with
Heterogeneous Clients", arXiv:2410.22815, Algorithm 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from fraq.aggregators.base import Aggregator, AggregatorState, Group, GroupOutput, ModuleSpec
from fraq.aggregators.fedit import weighted_sum
from fraq.aggregators.payload import WARM_START, ClientUpdate, Downlink, Factors

__all__ = ["LoraA2", "LoraA2State", "budget_mask"]


@dataclass(frozen=True)
class LoraA2State(AggregatorState):
    """The server's state between LoRA-A^2 rounds.

    Attributes:
        round: the round about to be aggregated, from 1. Odd rounds train B (A frozen),
            even rounds train A (B frozen). B starts at zero, so training A first would
            get zero gradient.
        adapters: module -> the global (B, A) the clients started this round from.
    """

    aggregator = "lora-a2"
    round: int
    adapters: Mapping[str, tuple[torch.Tensor, torch.Tensor]]

    def to_record(self) -> dict:
        return {"round": self.round, "adapters": {k: list(v) for k, v in self.adapters.items()}}

    @classmethod
    def from_record(cls, record: dict) -> LoraA2State:
        adapters = {k: tuple(v) for k, v in record["adapters"].items()}
        if not all(len(v) == 2 and all(isinstance(t, torch.Tensor) for t in v) for v in adapters.values()):
            raise ValueError("LoraA2State adapters must map module names to (B, A) tensor pairs")
        return cls(int(record["round"]), adapters)

    @property
    def trains(self) -> str:
        """``"B"`` or ``"A"``: the factor clients train (and the server averages) this round."""
        return LoraA2.trained_factors(self.round)

    @classmethod
    def initial(cls, adapters: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> LoraA2State:
        """Round 1 from the shared initial adapters (B = 0, A from a seeded initialization)."""
        return cls(1, dict(adapters))


def budget_mask(scores: Sequence[torch.Tensor], budget: int) -> list[torch.Tensor]:
    """Keep the ``budget`` largest scores across all modules; boolean masks, one per module.

    ``scores[j]`` holds module j's per-component importance (r_j,). Ties are broken by
    ``torch.topk``. With ``budget`` at least the number of components every mask is True.
    """
    flat = torch.cat([s.reshape(-1) for s in scores])
    keep = torch.zeros(flat.shape, dtype=torch.bool, device=flat.device)
    if budget >= flat.numel():
        keep[:] = True
    elif budget > 0:
        keep[torch.topk(flat, budget).indices] = True
    return list(keep.split([s.numel() for s in scores]))


class LoraA2(Aggregator):
    r"""Alternating-freeze averaging with per-client component budgets.

    In a B-round (odd) every client trains B with the shared A frozen, so
    :math:`\sum_k a_k s B_k A = s (\sum_k a_k B_k) A`: averaging the trained factor is
    exact. Even rounds do the same with A. The server sends only the averaged factor;
    the frozen one is already on every client.

    Budgets: a client with ``upload_rank`` r_i uploads only its r_i N most important
    rank-1 components over all N modules, scored by the Frobenius norm of their
    contribution, :math:`\|\Delta B_{:,i}\| \|A_{i,:}\|` in a B-round (rows of
    :math:`\Delta A` against columns of B in an A-round), with
    :math:`\Delta B = B_k - B_{prev}`. An unsent component counts as zero change: the
    server adds :math:`\sum_k a_k \Delta B_k` with no per-component renormalization. In
    deployment the client applies the mask before upload; the server applies it here as
    well, which changes nothing for an upload that is already masked.

    All clients share one global rank and scale per module. The server keeps its own copy
    of the frozen factor (``state``), so a client's frozen factor is not read after round 1.

    Downlink per client and module: m r in a B-round, n r in an A-round.
    Flops: 2 K m r (or 2 K n r) per module, plus the scores when budgets are set.
    """

    name = "lora-a2"
    client_init = WARM_START
    display_name = "LoRA-A²"
    paper_order = 4  # its row in the paper's Tables 1-3
    downlink_rule = "m r (B rounds) or n r (A rounds)"
    heterogeneous_ranks = False
    alternating_freeze = True
    rank_budgets = True
    state_type = LoraA2State
    not_an_adapter = ("LoRA-A^2 alternates frozen factors over rounds with server state; "
                      "independently trained peft adapters do not fit it")
    no_delta = not_an_adapter

    def _check_state(self, state, specs: Sequence[ModuleSpec]):
        if state is None:
            return None  # round 1: built from the uploads in _prepare
        if not isinstance(state, LoraA2State):
            raise TypeError(f"state must be a LoraA2State (the previous result.state), got {type(state).__name__}")
        if isinstance(state.round, bool) or not isinstance(state.round, int) or state.round < 1:
            raise ValueError(f"state.round(={state.round!r}) must be an int >= 1")
        for spec in specs:
            if spec.name not in state.adapters:
                raise ValueError(f"state has no adapter for module {spec.name!r}")
            B, A = state.adapters[spec.name]
            want_b, want_a = (spec.m, spec.ranks[0]), (spec.ranks[0], spec.n)
            if tuple(B.shape) != want_b or tuple(A.shape) != want_a:
                raise ValueError(f"state.adapters[{spec.name!r}] has shapes {tuple(B.shape)}, {tuple(A.shape)}; "
                                 f"the uploads need {want_b}, {want_a}")
        return state

    def _prepare(self, updates: Sequence[ClientUpdate], specs: Sequence[ModuleSpec], state):
        if state is None:
            # Round 1: B = 0 and the frozen A is the seeded initialization every client shares.
            adapters = {}
            for spec in specs:
                B0, A0 = updates[0].factors[spec.name]
                for k, u in enumerate(updates[1:], start=1):
                    if not torch.equal(u.factors[spec.name][1], A0):
                        raise ValueError(f"lora-a2 round 1 freezes A at the shared initialization, but "
                                         f"updates[{k}] uploaded a different A for module {spec.name!r}")
                adapters[spec.name] = (torch.zeros_like(B0), A0)
            state = LoraA2State.initial(adapters)
        if all(u.upload_rank is None for u in updates):
            return updates, state
        idx = 0 if state.trains == "B" else 1
        out = []
        for u in updates:
            if u.upload_rank is None:
                out.append(u)
                continue
            deltas, scores = [], []
            for spec in specs:
                Bp, Ap = state.adapters[spec.name]
                X = u.factors[spec.name][idx]
                d = X - (Bp if idx == 0 else Ap)
                if idx == 0:
                    score = torch.linalg.vector_norm(d, dim=-2) * torch.linalg.vector_norm(Ap, dim=-1)
                else:
                    score = torch.linalg.vector_norm(Bp, dim=-2) * torch.linalg.vector_norm(d, dim=-1)
                deltas.append(d)
                scores.append(score)
            masks = budget_mask(scores, u.upload_rank * len(specs))
            factors = dict(u.factors)
            for spec, d, keep in zip(specs, deltas, masks):
                prev = state.adapters[spec.name][idx]
                if idx == 0:
                    X = prev + d * keep.to(d.dtype).unsqueeze(-2)
                    factors[spec.name] = (X, u.factors[spec.name][1])
                else:
                    X = prev + d * keep.to(d.dtype).unsqueeze(-1)
                    factors[spec.name] = (u.factors[spec.name][0], X)
            out.append(dataclasses.replace(u, factors=factors))
        return out, state

    def _group(self, group: Group, state: LoraA2State) -> GroupOutput:
        idx = 0 if state.trains == "B" else 1
        K = len(group.weights)
        trained = [group.module_factors(k)[idx] for k in range(K)]
        avg = weighted_sum(trained, group.weights)
        s = group.spec.scales[0]
        out: GroupOutput = {}
        for spec, X in zip(group.specs, avg):
            Bp, Ap = state.adapters[spec.name]
            B, A = (X, Ap) if idx == 0 else (Bp, X)
            out[spec.name] = (Downlink(sent=(X,), start=Factors(B, A, s)), spec.ranks[0])
        return out

    def _finish(self, specs, downlinks, state: LoraA2State):
        adapters = {spec.name: (downlinks[0][spec.name].start.B, downlinks[0][spec.name].start.A) for spec in specs}
        info = {"round": state.round, "trained": state.trains}
        return LoraA2State(state.round + 1, adapters), info
