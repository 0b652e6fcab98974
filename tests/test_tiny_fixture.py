"""The recorded tiny run (tests/data/tiny-results.tar.gz) is what a tiny run writes today:
the same files, configs and result fields (its numbers are one machine's and differ)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _shape(value):
    """A result's structure: dict keys, recursively; lists and scalars by kind alone."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return type(value).__name__ if not isinstance(value, (int, float)) or isinstance(value, bool) else "number"


def _records(results: Path) -> dict[str, dict]:
    return {str(p.relative_to(results)): json.loads(p.read_text()) for p in sorted(results.rglob("*.json"))}


def test_the_recording_has_a_fresh_runs_files_configs_and_fields(tiny_runs, tiny_results):
    fresh, recorded = _records(tiny_runs), _records(tiny_results)
    if not (tiny_runs / "peft").is_dir():  # peft measured only where peft imports
        recorded = {k: v for k, v in recorded.items() if not k.startswith("peft/")}
    redo = "record it again: make tiny-fixture"
    assert sorted(fresh) == sorted(recorded), f"the recording's files differ from a fresh run's; {redo}"
    for name, rec in fresh.items():
        assert rec["config"] == recorded[name]["config"], f"{name}: config differs; {redo}"
        assert _shape(rec["result"]) == _shape(recorded[name]["result"]), f"{name}: result fields differ; {redo}"
