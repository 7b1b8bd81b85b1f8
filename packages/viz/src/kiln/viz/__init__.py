"""Web UI for rewrite traces, programs and the profiler timeline."""

__all__: list[str] = []
