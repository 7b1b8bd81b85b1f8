"""Concrete renderers (C, LLVM IR, Python, CUDA, PTX), each owning its compiler."""

__all__: list[str] = []
