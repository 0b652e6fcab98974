"""Peak memory of a round through the buffer: the stacks, one upload, the output, the workspace.

The tensor peak is torch's own count: every allocation and free of its CPU allocator, in
time order (:func:`benchmarks.measure.peak_memory`, the profiler's ``[memory]`` events),
at one thread. A round is measured whole: the buffer opened (its stacks allocated), each
client's upload made (allocated inside the measurement, as if received), added and
released, then the aggregate. Nothing here is a time.

The bound asserted, in bytes (float32):

    peak <= stacks + one upload + output + workspace + small,

- stacks: :attr:`RoundBuffer.storage`, sum over modules of (m + n) sum_k r_k entries;
- one upload: the upload in flight, (m + n) r_k entries per module;
- output: the result's tensors that are not the buffer's (FLoRA's downlink is the stacks);
- workspace: the method's own call beyond its stacks and output, measured on the filled
  buffer's ``aggregate`` alone, and itself checked against the paper's analytic workspace
  (:func:`benchmarks.experiments.workspace.analytic_workspace`) for the largest group,
  at the 1.5x that experiment targets;
- small: the per-block weight vectors the buffer makes when it weights its stacks,
  at most (L + 2) R float64 entries per block (:func:`fraq._stack._column_factors`).

A buffer that kept uploads, or a second copy of one, exceeds it by at least an upload,
far more than ``small``; the list path (every upload alive at the aggregate) must peak
higher than the buffer, so the comparison could fail.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.experiments.workspace import analytic_workspace
from benchmarks.measure import peak_memory
from fraq.aggregators import ClientUpdate, get_aggregator

SHAPES = {f"layers.{i}.{n}": s for i in range(4) for n, s in (("q", (96, 64)), ("o", (64, 128)))}
K, RANK = 6, 4


def _upload(k: int) -> ClientUpdate:
    g = torch.Generator().manual_seed(k)
    return ClientUpdate({n: (torch.randn(m, RANK, generator=g), torch.randn(RANK, c, generator=g))
                         for n, (m, c) in SHAPES.items()}, scale=1.0 + k, weight=10.0 + k)


def _bytes(tensors, skip=()) -> int:
    """Bytes of the distinct storages among ``tensors``, leaving out those in ``skip``."""
    seen = {t.untyped_storage().data_ptr() for t in skip}
    out = {}
    for t in tensors:
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            out[s.data_ptr()] = s.nbytes()
    return sum(out.values())


@pytest.mark.parametrize("method,options", [("fraq", {}), ("fraq", {"tau": 1.0}), ("fraq", {"rank": 3}),
                                            ("flora", {})])
def test_a_round_through_the_buffer_peaks_at_stacks_one_upload_output_and_workspace(method, options):
    agg = get_aggregator(method, **options)

    def through_buffer():
        buf = agg.open_round(SHAPES, clients=K, ranks=RANK)
        for k in range(K):
            u = _upload(k)
            buf.add(u)
            del u  # the server lets the upload go once it is in
        return buf.aggregate()

    def through_list():
        return agg.aggregate([_upload(k) for k in range(K)])

    def filled():
        buf = agg.open_round(SHAPES, clients=K, ranks=RANK)
        for k in range(K):
            buf.add(_upload(k))
        return buf

    through_buffer(), through_list()  # warm-up: lazily built constants stay out of the peaks
    whole = peak_memory(through_buffer)
    listed = peak_memory(through_list)

    again = filled()
    held = {}
    alone = peak_memory(lambda: held.setdefault("res", again.aggregate()))
    res = held["res"]
    stacks = _bytes(again.storage)
    upload = sum((m + n) * RANK * 4 for m, n in SHAPES.values())
    output = _bytes([t for d in res.downlinks for down in d.values() for t in down.sent], skip=again.storage)
    workspace = alone.peak - output
    blocks = {}  # (m, n) -> modules
    for name, shape in SHAPES.items():
        blocks.setdefault(shape, []).append(name)
    R = K * RANK
    small = sum((len(mods) + 2) * R * 8 for mods in blocks.values())
    largest = max(len(mods) * analytic_workspace(min(m, n), max(m, n), R, min(R, m, n)) for (m, n), mods in
                  blocks.items())

    assert stacks == sum((m + n) * R * 4 for m, n in SHAPES.values())
    assert workspace <= 1.5 * largest, (workspace, largest)
    assert whole.peak <= stacks + upload + output + workspace + small, \
        (whole.peak, stacks, upload, output, workspace, small)
    assert listed.peak > whole.peak, (listed.peak, whole.peak)
    assert listed.peak >= K * upload + output  # every upload is alive while the list path aggregates
