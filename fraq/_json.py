"""Strict JSON: every JSON the project writes parses with any standard parser.

Python's :mod:`json` writes ``NaN``, ``Infinity`` and ``-Infinity`` by default, which are
not JSON (RFC 8259 section 6) and which strict parsers (JavaScript's ``JSON.parse``, jq,
Go, Rust's serde_json) refuse. Every ``json.dump``/``json.dumps`` in the project therefore
passes ``allow_nan=False``, so a non-finite number raises where it is written instead of
producing a file others cannot read. Where a non-finite number can legitimately occur,
the writer says so explicitly: the certificate writes ``null`` with a note in words
(:meth:`fraq.aggregators.certificate.ModuleCertificate.to_json`); result records, whose
fields are read into pandas where null and NaN are the same missing value, pass through
:func:`finite`, which writes null.
"""

from __future__ import annotations

import math

__all__ = ["finite"]


def finite(obj):
    """``obj`` with every non-finite float (NaN, +-inf) replaced by None, through dicts,
    lists and tuples (a tuple becomes a list, as JSON writes it); ``obj`` is not modified."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
