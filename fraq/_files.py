"""File helpers shared by the writers of adapters (:mod:`fraq.peft_adapters`, :mod:`fraq.federated.export`)."""

from __future__ import annotations

import os


def default_mode(path: str | os.PathLike) -> None:
    """Give a file the permissions ``open`` would, 0o666 less the umask (safetensors creates its files 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
