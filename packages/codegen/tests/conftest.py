"""The codegen tests' configuration: none beyond the repository's pytest settings, and no shared fixture.

Their helpers are plain modules beside the tests: `corpus` (the kernel corpus with numpy references),
`renderers_for_tests` (CPU-like, GPU-like and scalar renderers) and `sinks_for_tests` (small kernel graphs). This
folder is on pytest's `pythonpath` (root pyproject.toml), so a test imports them by name, as do the renderer and
runtime tests that run codegen's corpus; scripts/check_test_paths.py keeps those names unique across the folders.
"""
