"""One method value: :class:`fraq.methods.MethodSpec` parses the one grammar and prints it back."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fraq.methods import MethodSpec

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,11}", fullmatch=True)
KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True)
VALUES = st.one_of(
    st.from_regex(r"[A-Za-z0-9_.+-]{1,10}", fullmatch=True),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers().map(str),
    st.sampled_from(["null", "true", "false", "[4]", ""]),
)
SPECS = st.builds(MethodSpec, NAMES, st.lists(st.tuples(KEYS, VALUES), max_size=4,
                                                  unique_by=lambda kv: kv[0]).map(tuple))


@given(SPECS)
def test_a_spec_prints_to_the_string_it_parses_from(spec):
    text = str(spec)
    assert MethodSpec.parse(text) == spec
    assert str(MethodSpec.parse(text)) == text


@given(SPECS)
def test_keyword_options_are_written_back_in_the_grammar(spec):
    """MethodSpec.of(name, spec.kwargs) reads back to the same keyword options, and is its own
    fixed point (the form a table row writes); a value JSON cannot hold (a list, NaN) is refused."""
    import math

    kwargs = spec.kwargs
    if any(isinstance(v, list) or isinstance(v, float) and not math.isfinite(v) for v in kwargs.values()):
        with pytest.raises((TypeError, ValueError), match=r"option \w+\(="):
            MethodSpec.of(spec.name, kwargs)
        return
    written = MethodSpec.of(spec.name, kwargs)
    assert written.kwargs == kwargs and list(written.kwargs) == list(kwargs)
    assert MethodSpec.of(spec.name, written.kwargs) == written == MethodSpec.parse(str(written))


@pytest.mark.parametrize("options, text", [
    ({}, "fraq"), ({"tau": 0.8}, "fraq:tau=0.8"), ({"tau": 0.95, "kernel": "fraq"}, "fraq:tau=0.95,kernel=fraq"),
    ({"round": 1}, "fraq:round=1"), ({"rank": None, "x": True}, "fraq:rank=null,x=true"),
    ({"eig_dtype": torch.float64}, "fraq:eig_dtype=float64"),
])
def test_keyword_options_written_as_json_and_dtypes_by_name(options, text):
    assert str(MethodSpec.of("fraq", options)) == text


@pytest.mark.parametrize("options, error, match", [
    ({"tau": "0.9"}, ValueError, r"option tau\(='0.9'\): text that reads as JSON"),
    ({"tau": float("nan")}, ValueError, r"option tau\(=nan\) must be finite"),
    ({"rank": [4]}, TypeError, r"option rank\(=\[4\]\) must be text"),
    ({"backend": "a,b"}, ValueError, r"option backend\(='a,b'\)"),
])
def test_keyword_options_the_grammar_cannot_hold_are_refused(options, error, match):
    with pytest.raises(error, match=match):
        MethodSpec.of("fraq", options)


@pytest.mark.parametrize("text, name, kwargs", [
    ("fraq", "fraq", {}),
    ("fraq:tau=0.80", "fraq", {"tau": 0.8}),
    ("florist:tau=0.85", "florist", {"tau": 0.85}),
    ("fraq:rank=8,tau=null", "fraq", {"rank": 8, "tau": None}),
    ("fraq:backend=cholesky,tau=0.9", "fraq", {"backend": "cholesky", "tau": 0.9}),
    ("fraq:tau=0.80,backend=householder", "fraq", {"tau": 0.8, "backend": "householder"}),
])
def test_todays_spellings_parse(text, name, kwargs):
    spec = MethodSpec.parse(text)
    assert (spec.name, spec.kwargs) == (name, kwargs)
    assert str(spec) == text  # the label made from it is the label made from the text
    assert MethodSpec.parse(spec) is spec  # a spec is carried, never parsed again


def test_blanks_around_separators_are_dropped():
    assert str(MethodSpec.parse("  fraq: tau = 0.80 , backend=polar ")) == "fraq:tau=0.80,backend=polar"


@pytest.mark.parametrize("backend", ["cholesky", "cholesky-qr2", "newton-schulz"])
def test_the_backend_without_its_key_names_the_spelling_to_use(backend):
    with pytest.raises(ValueError, match=rf"method\(='fraq:{backend}'\): .* write 'fraq:backend={backend}'"):
        MethodSpec.parse(f"fraq:{backend}")


@pytest.mark.parametrize("text, match", [
    ("", r"method\(=''\) must be a non-empty string"),
    (None, r"method\(=None\) must be a non-empty string"),
    ("fraq:tau", r"option 'tau' must be key=value; for the basis backend"),
    ("fraq:tau=0.9,1x=2", r"option '1x=2' must be key=value"),
    (":tau=0.9", r"method\(=':tau=0.9'\): method name\(=''\)"),
    ("fraq:tau=0.9,tau=0.5", r"method\(='fraq:tau=0.9,tau=0.5'\): option 'tau' is given twice"),
])
def test_bad_specs_echo_the_text(text, match):
    with pytest.raises(ValueError, match=match):
        MethodSpec.parse(text)


@pytest.mark.integration
def test_the_federated_config_and_the_cli_share_the_parse():
    from fraq.federated.config import method_aggregator, parse_method

    assert parse_method("fraq:backend=householder,tau=0.9") == ("fraq", {"backend": "householder", "tau": 0.9})
    with pytest.raises(ValueError, match=r"write 'fraq:backend=cholesky'"):
        method_aggregator("fraq:cholesky")
    agg = method_aggregator(MethodSpec.parse("fraq:tau=0.9"))
    assert agg.name == "fraq"
    out = subprocess.run([sys.executable, "-m", "fraq", "aggregate", "nowhere", "--report", "--method", "fraq:cholesky"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "write 'fraq:backend=cholesky'" in out.stderr, out.stderr


def test_spec_module_imports_no_torch():
    code = "import sys, fraq.methods; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------ dtype options
@pytest.mark.parametrize("text, dtype", [("float64", torch.float64), ("float32", torch.float32), ("null", None)])
def test_eig_dtype_is_written_by_name_and_reaches_the_aggregator_as_a_dtype(text, dtype):
    from fraq.federated.config import method_aggregator

    spec = MethodSpec.parse(f"fraq:eig_dtype={text},tau=0.9")
    assert spec.kwargs == {"eig_dtype": dtype, "tau": 0.9} and str(spec) == f"fraq:eig_dtype={text},tau=0.9"
    assert method_aggregator(spec).eig_dtype is dtype


@pytest.mark.parametrize("text", ["float16", "bfloat16", "torch.float64", "double", "64", "Float64"])
def test_eig_dtype_other_than_float32_or_float64_is_refused_where_parsed(text):
    with pytest.raises(ValueError, match=re.escape(f"method(='fraq:eig_dtype={text}'): option eig_dtype(={text!r}) "
                                                   f"must be one of float32, float64 (or null for the default)")):
        MethodSpec.parse(f"fraq:eig_dtype={text}")
