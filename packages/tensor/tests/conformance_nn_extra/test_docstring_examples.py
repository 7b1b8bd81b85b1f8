"""The docstring examples of the modules this folder covers run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

from kiln.tensor import Tensor, nn, optim


@pytest.mark.parametrize("module", ["nn.lazy", "nn.conv", "nn.normalization", "optim.classic"])
def test_docstring_examples_run(module: str) -> None:
    globs = {"Tensor": Tensor, **{name: getattr(nn, name) for name in nn.__all__}}
    globs |= {name: getattr(optim, name) for name in optim.__all__}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = doctest.DocTestFinder().find(importlib.import_module(f"kiln.tensor.{module}"), globs=globs)
    assert sum(len(test.examples) for test in tests) > 0
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
