"""The uops tests' configuration: none beyond the repository's pytest settings, and no shared fixture.

A test that changes a knob or patches a function does so inside `Context(...)` or through pytest's `monkeypatch`,
both of which restore it; no helper module lives here, so this folder is not on pytest's `pythonpath`.
"""
