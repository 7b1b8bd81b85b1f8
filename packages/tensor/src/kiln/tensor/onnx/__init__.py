"""kiln.tensor.onnx: run ONNX models on kiln Tensors (needs the optional extra `kiln-tensor[onnx]`)."""

from kiln.tensor.onnx.runner import OnnxRunner

__all__ = ["OnnxRunner"]
