"""ONNX element types <-> kiln dtypes and numpy dtypes: the types kiln can hold, named for error messages."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper

from kiln.tensor import dtypes
from kiln.uops.dtype import DType

__all__ = ["SUPPORTED_ELEMENT_TYPES", "dtype_of_element_type", "element_type_name", "numpy_dtype_of_element_type"]

# ONNX's TensorProto.DataType -> the kiln dtype that holds it. Strings, complex numbers, 4-bit and 8-bit float
# formats have no kiln dtype; bfloat16 arrives through float32 (numpy has no bfloat16 of its own).
SUPPORTED_ELEMENT_TYPES: dict[int, DType] = {
    TensorProto.FLOAT: dtypes.float32,
    TensorProto.DOUBLE: dtypes.float64,
    TensorProto.FLOAT16: dtypes.float16,
    TensorProto.BFLOAT16: dtypes.bfloat16,
    TensorProto.INT8: dtypes.int8,
    TensorProto.INT16: dtypes.int16,
    TensorProto.INT32: dtypes.int32,
    TensorProto.INT64: dtypes.int64,
    TensorProto.UINT8: dtypes.uint8,
    TensorProto.UINT16: dtypes.uint16,
    TensorProto.UINT32: dtypes.uint32,
    TensorProto.UINT64: dtypes.uint64,
    TensorProto.BOOL: dtypes.bool,
}


def element_type_name(element_type: int) -> str:
    """The ONNX spelling of an element type ('FLOAT', 'INT64', ...), or its number when onnx does not know it."""
    try:
        return str(TensorProto.DataType.Name(element_type))
    except ValueError:
        return str(element_type)


def dtype_of_element_type(element_type: int, where: str) -> DType:
    """The kiln dtype of an ONNX element type; NotImplementedError naming `where` and the type when kiln has none."""
    if element_type not in SUPPORTED_ELEMENT_TYPES:
        supported = ", ".join(element_type_name(code) for code in SUPPORTED_ELEMENT_TYPES)
        raise NotImplementedError(
            f"{where}: element type {element_type_name(element_type)} has no kiln dtype (supported: {supported})"
        )
    return SUPPORTED_ELEMENT_TYPES[element_type]


def numpy_dtype_of_element_type(element_type: int) -> np.dtype[Any]:
    """The numpy dtype onnx uses for an element type (bfloat16 is read as float32)."""
    if element_type == TensorProto.BFLOAT16:
        return np.dtype(np.float32)
    return np.dtype(helper.tensor_dtype_to_np_dtype(element_type))
