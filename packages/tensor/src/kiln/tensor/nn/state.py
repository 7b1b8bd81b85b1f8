"""`kiln.tensor.nn.state`: the state-dict and checkpoint functions under the path tinygrad users import them from
(`from tinygrad.nn.state import get_parameters, safe_load, ...`); they live in `kiln.tensor.state`."""

from kiln.tensor.state import (
    IncompatibleKeys,
    dequantize,
    get_parameters,
    get_state_dict,
    gguf_load,
    gguf_load_raw,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    torch_load,
)

__all__ = [
    "IncompatibleKeys",
    "dequantize",
    "get_parameters",
    "get_state_dict",
    "gguf_load",
    "gguf_load_raw",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "torch_load",
]
