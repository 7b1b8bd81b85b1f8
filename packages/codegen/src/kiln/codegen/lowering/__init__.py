"""Lowering passes: optimized kernel sink -> a graph the linearizer can order (see `pipeline.py`)."""
