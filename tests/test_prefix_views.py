"""fraq.aggregators.group.prefix_views: module l's first c_l columns (or rows) of a stacked
result as the very views slicing gives (shape, strides, storage offset, values), on every
layout a stack comes in (contiguous, column-major, a narrower cut of a wider buffer,
permuted, expanded), counts from 0 to the full size. Exact equalities: views, not arithmetic."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fraq.aggregators.group import prefix_views

LAYOUTS = ("contiguous", "column-major", "cut", "permuted", "expanded", "cut-column-major")


def _make(layout: str, L: int, a: int, b: int) -> torch.Tensor:
    base = torch.arange(float(L * a * (b + 3))).reshape(L, a, b + 3)
    if layout == "contiguous":
        return base[..., :b].contiguous()
    if layout == "column-major":
        return base[..., :b].mT.contiguous().mT
    if layout == "cut":  # the static pass's result cut at the largest rank
        return base[..., :b]
    if layout == "cut-column-major":
        return torch.arange(float(L * (b + 3) * a)).reshape(L, b + 3, a)[:, :b].mT
    if layout == "permuted":
        return torch.arange(float(a * L * b)).reshape(a, L, b).permute(1, 0, 2)
    return base[:1, :, :b].expand(L, a, b)


def _reference(t, counts, dim):
    return [t[l, :, :c] if dim == -1 else t[l, :c, :] for l, c in enumerate(counts)]


@settings(max_examples=60, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), L=st.integers(1, 6), a=st.integers(1, 5), b=st.integers(1, 5),
       dim=st.sampled_from([-1, -2]), data=st.data())
def test_the_views_are_the_slices(layout, L, a, b, dim, data):
    t = _make(layout, L, a, b)
    size = t.shape[dim]
    counts = data.draw(st.lists(st.integers(0, size), min_size=L, max_size=L))
    got, want = prefix_views(t, counts, dim), _reference(t, counts, dim)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
        assert g.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        assert torch.equal(g, w)


def test_counts_checked():
    t = torch.zeros(3, 4, 5)
    with pytest.raises(ValueError, match="counts"):
        prefix_views(t, [1, 6, 2], -1)
    with pytest.raises(ValueError, match="L counts"):
        prefix_views(t, [1, 2], -1)
    assert prefix_views(torch.zeros(0, 4, 5), [], -1) == []
