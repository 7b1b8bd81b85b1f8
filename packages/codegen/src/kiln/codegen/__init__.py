"""Kernel sink -> optimized sink -> LINEAR -> PROGRAM lifecycle; Renderer/Compiler interfaces; reference interpreter."""

__all__: list[str] = []
