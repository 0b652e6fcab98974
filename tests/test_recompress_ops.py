"""The op budget of fraq.recompress's fast path: aten ops dispatched per call.

On a GPU every non-view op is at least one kernel launch with host work around it, so
the count of ops one call dispatches is what the GPU path's fixed cost is held to; it
is measured here on the CPU, with a dispatch-mode counter (views included). The budget
fails when exceeded, so the fast path cannot grow back. The math itself is about ten
kernels (a QR, the Gram products, one eigenproblem, two products back); the rest is the
fused range and cancellation check read in the one host synchronization, and views.
"""

import pytest
import torch

import fraq
from benchmarks.measure import threads
from benchmarks.measure.ops import OpCounter, count_ops
from fraq.synthetic import lora_clients

SMALL_BUDGET = 60  # one 64 x 48 matrix, K = 4 clients of rank 4
BATCH_BUDGET = 150  # the RoBERTa-base batch, 36 x 768 x 768, K = 10, r_k = 8, at one thread


def _count(B, A, **kw):
    res = fraq.recompress(B, A, **kw)
    assert res.info["rescaled"] == 0 and res.info.get("fallback_count", 0) == 0  # the fast path ran
    counter = count_ops(lambda: fraq.recompress(B, A, **kw))
    return counter.total, counter.ops


@pytest.fixture
def one_thread():
    with threads(1):
        yield


@pytest.mark.parametrize("mode", [dict(tau=0.95), dict(rank=8)])
@pytest.mark.parametrize("gram", ["auto", "product"])
@pytest.mark.parametrize("m,n", [(64, 48), (48, 64)])
def test_small_matrix_within_budget(one_thread, mode, gram, m, n):
    Bs, As = lora_clients(m, n, [4] * 4, seed=0)
    B, A = fraq.stack(Bs, As)
    total, ops = _count(B, A, gram=gram, **mode)
    assert total <= SMALL_BUDGET, (total, ops.most_common())


def test_roberta_batch_within_budget(one_thread):
    Bs, As = lora_clients(768, 768, [8] * 10, batch=(36,), seed=0)
    B, A = fraq.stack(Bs, As)
    total, ops = _count(B, A, tau=0.95)
    assert total <= BATCH_BUDGET, (total, ops.most_common())


def test_the_counter_counts():
    """The counter sees what a call dispatches (a budget over a blind counter could not fail)."""
    with OpCounter() as counter:
        torch.ones(3) + torch.ones(3)
    assert counter.ops["aten.add"] == 1 and sum(counter.ops.values()) >= 3
