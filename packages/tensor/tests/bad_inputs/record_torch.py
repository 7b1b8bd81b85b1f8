"""Record PyTorch's answers for the bad_inputs suite: `/path/to/torch-venv/bin/python record_torch.py` (torch is never a
kiln dependency; the tests read the committed torch_expected.json).

Each case is a name and a function of the torch module; the JSON holds either {"value": nested list / scalar,
"dtype": str} or {"error": exception class name}.
"""

from __future__ import annotations

import json
import operator
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

CASES: dict[str, Callable[[], Any]] = {
    # where: tinygrad's condition-first method, torch's function, torch's method form
    "where_function": lambda: torch.where(torch.tensor([True, False, True]), torch.tensor([1.0, 2.0, 3.0]), 0.0),
    "where_method_torch_form": lambda: torch.tensor([1.0, 2.0, 3.0]).where(torch.tensor([False, True, True]), -1.0),
    "where_method_broadcast": lambda: torch.tensor([[1.0], [2.0]]).where(torch.tensor([True, False]), 5.0),
    "where_int_values": lambda: torch.tensor([4, 5, 6]).where(torch.tensor([True, False, False]), 0),
    # max / min with a dim: (values, indices)
    "max_dim1_values": lambda: torch.tensor([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]]).max(1).values,
    "max_dim1_indices": lambda: torch.tensor([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]]).max(1).indices,
    "max_dim0_keepdim_values": lambda: torch.tensor([[1, 5], [7, 2]]).max(0, keepdim=True).values,
    "max_dim0_keepdim_indices": lambda: torch.tensor([[1, 5], [7, 2]]).max(0, keepdim=True).indices,
    "min_dim_neg1_values": lambda: torch.tensor([[3.0, 1.0, 1.0], [0.0, 4.0, -2.0]]).min(dim=-1).values,
    "min_dim_neg1_indices": lambda: torch.tensor([[3.0, 1.0, 1.0], [0.0, 4.0, -2.0]]).min(dim=-1).indices,
    "max_nan_values": lambda: torch.tensor([[1.0, float("nan"), 3.0]]).max(1).values,
    "max_nan_indices": lambda: torch.tensor([[1.0, float("nan"), 3.0]]).max(1).indices,
    "max_all": lambda: torch.tensor([[1, 9], [3, 4]]).max(),
    "max_other": lambda: torch.tensor([1.0, 5.0]).max(torch.tensor([3.0, 2.0])),
    "sort_values": lambda: torch.tensor([3, 1, 2, 1]).sort().values,
    "sort_indices": lambda: torch.tensor([3, 1, 2, 1]).sort(stable=True).indices,
    "topk_values": lambda: torch.tensor([1.0, 5.0, 3.0, 4.0]).topk(2).values,
    "topk_indices": lambda: torch.tensor([1.0, 5.0, 3.0, 4.0]).topk(2).indices,
    "cummax_values": lambda: torch.tensor([1, 3, 2, 3]).cummax(0).values,
    "cummax_indices": lambda: torch.tensor([1, 3, 2, 3]).cummax(0).indices,
    "max_empty_all": lambda: torch.zeros(0).max(),
    "max_dim_empty": lambda: torch.zeros(0, 3).max(0),
    # scalar conversions and Python protocols
    "float_two_elements": lambda: float(torch.tensor([1.0, 2.0])),
    "float_no_elements": lambda: float(torch.zeros(0)),
    "int_two_elements": lambda: int(torch.tensor([1, 2])),
    "int_of_float": lambda: int(torch.tensor(-2.7)),
    "int_of_nan": lambda: int(torch.tensor(float("nan"))),
    "int_of_inf": lambda: int(torch.tensor(float("inf"))),
    "float_of_int": lambda: float(torch.tensor([3])),
    "bool_two_elements": lambda: bool(torch.tensor([1, 2])),
    "bool_no_elements": lambda: bool(torch.zeros(0)),
    "bool_nan": lambda: bool(torch.tensor(float("nan"))),
    "bool_zero": lambda: bool(torch.tensor([0.0])),
    "len_0d": lambda: len(torch.tensor(1.0)),
    "len_2d": lambda: len(torch.zeros(3, 2)),
    "iter_0d": lambda: list(torch.tensor(1.0)),
    "iter_rows": lambda: [row.tolist() for row in torch.tensor([[1, 2], [3, 4]])],
    "index_of_float": lambda: operator.index(torch.tensor(1.0)),
    "index_of_int": lambda: operator.index(torch.tensor([3])),
    "index_of_two": lambda: operator.index(torch.tensor([3, 4])),
    "list_indexed_by_tensor": lambda: [10, 20, 30][torch.tensor(1)],
    "item_two_elements": lambda: torch.tensor([1, 2]).item(),
    "tolist_0d": lambda: torch.tensor(2.5).tolist(),
    "tolist_2d_int": lambda: torch.tensor([[1, 2], [3, 4]]).tolist(),
    "asarray": lambda: np.asarray(torch.tensor([[1.5, 2.0]])).tolist(),
    # numpy operands: a numpy array is a tensor operand (float64 stays float64), a numpy scalar a Python scalar
    "numpy_scalar_times_tensor": lambda: np.float32(2) * torch.tensor([1.0, 2.0]),
    "numpy_f64_scalar_plus_f32": lambda: np.float64(0.5) + torch.tensor([1.0, 2.0]),
    "numpy_int_scalar_times_int": lambda: np.int64(3) * torch.tensor([1, 2], dtype=torch.int32),
    "tensor_plus_numpy_array": lambda: torch.tensor([1.0, 2.0]) + torch.from_numpy(np.array([0.5, 0.25])),
    "tensor_times_numpy_f32": lambda: torch.tensor([1.0, 2.0]) * torch.from_numpy(np.array([3.0, 4.0], np.float32)),
    "int_tensor_plus_numpy_int": lambda: torch.tensor([1, 2]) + torch.from_numpy(np.array([5, 6], np.int32)),
    "tensor_lt_numpy": lambda: torch.tensor([1.0, 5.0]) < torch.from_numpy(np.array([2.0, 2.0], np.float32)),
    # index checks
    "index_out_of_range": lambda: torch.tensor([1, 2, 3])[torch.tensor([10])],
    "index_negative_out_of_range": lambda: torch.tensor([1, 2, 3])[torch.tensor([-4])],
    "index_negative_in_range": lambda: torch.tensor([1, 2, 3])[torch.tensor([-1, -3])],
    "gather_out_of_range": lambda: torch.tensor([[1, 2], [3, 4]]).gather(1, torch.tensor([[0, 2], [1, 0]])),
    "one_hot_out_of_range": lambda: torch.nn.functional.one_hot(torch.tensor([0, 5]), 3),
    "one_hot_negative": lambda: torch.nn.functional.one_hot(torch.tensor([0, -1]), 3),
    "cross_entropy_bad_target": lambda: torch.nn.functional.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3])),
    "embedding_out_of_range": lambda: torch.nn.functional.embedding(torch.tensor([4]), torch.zeros(3, 2)),
    "int_div_by_zero": lambda: torch.tensor([1, 2]) // torch.tensor([0, 1]),
    "int_mod_by_zero": lambda: torch.tensor([1, 2]) % torch.tensor([0, 1]),
}


def _record(function: Callable[[], Any]) -> dict[str, Any]:
    try:
        result = function()
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error).splitlines()[0]}
    if isinstance(result, torch.Tensor):
        return {"value": result.tolist(), "dtype": str(result.dtype).removeprefix("torch."), "type": "Tensor"}
    if isinstance(result, tuple):
        return {"value": [item.tolist() for item in result], "type": "tuple"}
    return {"value": result, "type": type(result).__name__}


def main() -> None:
    recorded = {name: _record(function) for name, function in CASES.items()}
    path = pathlib.Path(__file__).with_name("torch_expected.json")
    path.write_text(json.dumps(recorded, indent=1, sort_keys=True, allow_nan=True) + "\n")
    print(f"wrote {len(recorded)} cases ({torch.__version__}) to {path}")


if __name__ == "__main__":
    main()
