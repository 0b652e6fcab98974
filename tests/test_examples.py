"""The Examples sections of the public functions run as written and check what they say
(scipy's convention: each example verifies the reconstruction against a float64 reference)."""

import doctest
import importlib

import pytest

import fraq


@pytest.mark.parametrize("name", ["recompress", "stack", "svd"])
def test_examples_run(name):
    fn = getattr(fraq, name)
    module = importlib.import_module(fn.__module__)
    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(fn, name, module=module, globs={}) if t.examples]
    assert tests, f"fraq.{name} has no Examples section"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    assert runner.failures == 0
