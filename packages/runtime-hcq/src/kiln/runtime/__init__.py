"""Devices, buffers, allocators, HCQ queues/signals, CPU/PYTHON/CUDA devices, generic memory managers."""

__all__: list[str] = []
