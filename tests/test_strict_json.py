"""Every JSON the project writes is strict (RFC 8259: no NaN or Infinity), so any standard
parser reads it; where a non-finite number can occur, the writer turns it into null."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

from fraq.internals import finite

ROOT = Path(__file__).resolve().parents[1]


def _writers():
    """(file, line, call) of every ``json.dump``/``json.dumps`` call in fraq/, benchmarks/, analysis/."""
    for top in ("fraq", "benchmarks", "analysis"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "vendor" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in ("dump", "dumps") and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id == "json":
                    yield path.relative_to(ROOT), node.lineno, node


def test_every_json_writer_refuses_nan_and_infinity():
    calls = list(_writers())
    assert len(calls) > 10  # the scan finds the writers
    lax = [f"{p}:{line}" for p, line, call in calls
           if not any(k.arg == "allow_nan" and isinstance(k.value, ast.Constant) and k.value.value is False
                      for k in call.keywords)]
    assert not lax, f"json.dump(s) without allow_nan=False: {lax}"


def test_finite_turns_non_finite_numbers_into_null_and_leaves_its_input():
    record = {"a": math.nan, "b": [1.0, math.inf, (-math.inf, 2)], "c": {"d": 0.5, "e": "inf"}, "f": None}
    text = json.dumps(finite(record), allow_nan=False)
    assert json.loads(text) == {"a": None, "b": [1.0, None, [None, 2]], "c": {"d": 0.5, "e": "inf"}, "f": None}
    assert math.isnan(record["a"]) and record["b"][1] == math.inf


def test_a_result_record_with_nan_is_written_strict(tmp_path):
    from fraq.internals import write_result

    def refuse(name):
        raise ValueError(name)

    path = write_result(tmp_path, "exp", "k", {"tau": 0.95}, {"error": math.nan, "ratio": math.inf, "ms": 1.5})
    rec = json.loads(path.read_text(), parse_constant=refuse)
    assert rec["result"] == {"error": None, "ratio": None, "ms": 1.5}
