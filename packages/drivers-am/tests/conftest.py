"""The AMD driver tests' configuration: none beyond the repository's pytest settings, and no shared fixture.

Each test builds the simulated hardware it needs (`SimulatedAMHardware`), so no device or register state is shared
between tests; no helper module lives here, so this folder is not on pytest's `pythonpath`.
"""
