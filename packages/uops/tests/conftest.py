"""The uops tests' configuration: none beyond the repository's pytest settings, and no shared fixture.

A test that changes a knob does so inside `Context(...)`, which restores it; no helper module lives here, so this
folder is not on pytest's `pythonpath`.
"""
