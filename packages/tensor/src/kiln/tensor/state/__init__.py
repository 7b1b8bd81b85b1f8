"""State and checkpoints: state dicts, safetensors, PyTorch .pth and GGUF files, quantized-block decoding."""

from kiln.tensor.state.safetensors import safe_load, safe_load_metadata, safe_save
from kiln.tensor.state.state_dict import IncompatibleKeys, get_parameters, get_state_dict, load_state_dict
from kiln.tensor.state.torch_pickle import ALLOWED_GLOBALS, torch_load

__all__ = [
    "ALLOWED_GLOBALS",
    "IncompatibleKeys",
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "torch_load",
]
