"""Lazy Tensor, autograd, scheduler with fusion, realize engine."""

__all__: list[str] = []
