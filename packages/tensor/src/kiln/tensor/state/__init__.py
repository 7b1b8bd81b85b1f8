"""State and checkpoints: state dicts, safetensors, PyTorch .pth and GGUF files, quantized-block decoding."""

from kiln.tensor.state.gguf import gguf_load, gguf_load_raw
from kiln.tensor.state.quantization import GGML_BLOCKS, BlockFormat, GGMLType, dequantize
from kiln.tensor.state.safetensors import safe_load, safe_load_metadata, safe_save
from kiln.tensor.state.state_dict import IncompatibleKeys, get_parameters, get_state_dict, load_state_dict
from kiln.tensor.state.torch_pickle import ALLOWED_GLOBALS, torch_load

__all__ = [
    "ALLOWED_GLOBALS",
    "GGML_BLOCKS",
    "BlockFormat",
    "GGMLType",
    "dequantize",
    "gguf_load",
    "gguf_load_raw",
    "IncompatibleKeys",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "torch_load",
]
