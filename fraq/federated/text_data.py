"""The one type every data source of the federated harness returns: a labelled train / test split.

:mod:`fraq.federated.dataset` (the generated corpus, local files, the hub) and
:mod:`fraq.federated.published` (the publishers' files) both build it; it depends on
neither, so neither depends on the other through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TextData"]


@dataclass(frozen=True)
class TextData:
    """A labelled train / test split.

    Attributes:
        train_texts, test_texts: the sentences.
        train_labels, test_labels: int64 arrays of label indices into ``label_names``.
        train_tasks: per training example its task (the generated corpus's domain, or a
            ``task`` column), for the pathological partition; None when the data has none.
        label_names: one name per class.
    """

    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray
    label_names: list[str]
    train_tasks: list[str] | None = None

    @property
    def num_labels(self) -> int:
        return len(self.label_names)
