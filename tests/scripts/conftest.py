"""The configuration of the tests of scripts/ (tests/scripts/): no shared fixture.

scripts/ is not a package: `script_loading.load_script` (tests/scripts/script_loading.py) loads a script as a
module. This folder is on pytest's `pythonpath` (root pyproject.toml), so a test imports that helper by name. The
conftest lives here rather than in tests/: pytest would import tests/conftest.py as the module `tests.conftest`, the
name packages/viz/tests/conftest.py has as part of the package `tests` (packages/viz/tests/__init__.py).
"""
