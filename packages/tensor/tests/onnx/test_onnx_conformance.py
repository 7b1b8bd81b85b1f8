"""onnx's backend node cases through kiln.tensor.onnx, with onnx's comparison (rtol 1e-3, atol 1e-7 by default).

Every case onnx generates runs unless the skip list below names it, its operator, its domain or an element type
it uses, each with a reason. `test_skipped_operators_are_unsupported` keeps the operator list honest: an operator
kiln learns must leave the list (its cases then have to pass).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

pytest.importorskip("onnx")

from kiln.tensor.onnx.conformance import ConformanceCase, conformance_cases, run_case_with_kiln
from kiln.tensor.onnx.registry import OPERATORS
from kiln.tensor.onnx.runner import OnnxRunner

_LATER = "not translated yet (issue 39, part 2)"
_MAPS = "maps (and sequences of them): kiln runs tensors and sequences or optionals of tensors"
_RANDOM = "random sampling: outputs cannot match a reference draw"
_STRINGS = "string tensors: kiln has no string dtype"

UNSUPPORTED_OPERATORS: dict[str, str] = {
    # attention, losses, image and signal operators
    **dict.fromkeys(
        [
            "RoiAlign",
            "MelWeightMatrix",
        ],
        _LATER,
    ),
    **dict.fromkeys(
        ["Bernoulli", "RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal", "Multinomial"], _RANDOM
    ),
    **dict.fromkeys(["StringSplit", "StringNormalizer", "StringConcat", "RegexFullMatch", "TfIdfVectorizer"], _STRINGS),
    "ImageDecoder": "decodes encoded image bytes: needs an image codec, not tensor math",
}

UNSUPPORTED_DOMAINS: dict[str, str] = {
    "ai.onnx.ml": "the classic-ML domain (trees, label encoders) is not part of kiln.tensor.onnx",
    "ai.onnx.preview.training": "training operators (optimizers) are not part of inference",
    "ai.onnx.preview": "preview operators (FlexAttention) are not translated yet",
}

# kiln has no dtype for these ONNX element types
UNSUPPORTED_ELEMENT_TYPES: dict[int, str] = {
    onnx.TensorProto.STRING: _STRINGS,
    **dict.fromkeys(
        [
            onnx.TensorProto.FLOAT8E4M3FN,
            onnx.TensorProto.FLOAT8E4M3FNUZ,
            onnx.TensorProto.FLOAT8E5M2,
            onnx.TensorProto.FLOAT8E5M2FNUZ,
            onnx.TensorProto.FLOAT4E2M1,
            *([onnx.TensorProto.FLOAT8E8M0] if hasattr(onnx.TensorProto, "FLOAT8E8M0") else []),
        ],
        "8-bit and 4-bit float formats: no kiln dtype",
    ),
    **dict.fromkeys(
        [
            onnx.TensorProto.INT4,
            onnx.TensorProto.UINT4,
            *[getattr(onnx.TensorProto, name) for name in ("INT2", "UINT2") if hasattr(onnx.TensorProto, name)],
        ],
        "4-bit and 2-bit integers: no kiln dtype",
    ),
    onnx.TensorProto.COMPLEX64: "complex numbers: no kiln dtype",
    onnx.TensorProto.COMPLEX128: "complex numbers: no kiln dtype",
}

SKIPPED_CASES: dict[str, str] = {
    **dict.fromkeys(
        [f"test_training_dropout{suffix}" for suffix in ("", "_default", "_default_mask", "_mask")],
        _RANDOM,
    ),
    **dict.fromkeys(
        ["test_dft_inverse", "test_dft_inverse_opset19"],
        "the reference holds float32 rounding noise (1.9e-7 where the exact value is 0), above atol 1e-7",
    ),
    "test_col2im_5d": "Col2Im over 3 spatial dims: kiln's fold is 2-D",
    **dict.fromkeys(
        ["test_unique_sorted_with_axis", "test_unique_sorted_with_axis_3d", "test_unique_sorted_with_negative_axis"],
        "Unique along an axis: kiln's Tensor.unique works on the flattened tensor",
    ),
    "test_scan_sum": "Scan-8 (the batched form with sequence_lens) is not translated; Scan-9 and later are",
    "test_quantizelinear_blocked_symmetric": "the reference output is an object array (int16 blocked quantization)",
    "test_attention_4d_causal_fp16_expanded": "float16 accumulation differs from the reference beyond rtol 1e-3",
    **dict.fromkeys(
        [
            f"test_attention_{name}_bf16{suffix}"
            for suffix in ("", "_expanded")
            for name in ("3d_causal", "4d_attn_mask_causal", "4d_causal", "4d_causal_padded_kv", "4d_padded_kv")
        ],
        "bfloat16 attention: results differ from numpy's bfloat16 reference by one bfloat16 step (rtol 1e-3 is below "
        "bfloat16's resolution)",
    ),
}


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    found = [graph]
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                found += _graphs(attribute.g)
            found += [sub for each in attribute.graphs for sub in _graphs(each)]
    return found


def _element_type(type_proto: onnx.TypeProto) -> int | None:
    """The element type of a tensor, or of the tensors a sequence or optional holds; None when no type is given,
    -1 for anything else (maps)."""
    kind = type_proto.WhichOneof("value")
    if kind is None:
        return None
    if kind == "tensor_type":
        return int(type_proto.tensor_type.elem_type)
    if kind == "sequence_type":
        return _element_type(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _element_type(type_proto.optional_type.elem_type)
    return -1


def _element_types(model: onnx.ModelProto) -> set[int]:
    types = set()
    for graph in _graphs(model.graph):
        for value in [*graph.input, *graph.output, *graph.value_info]:
            element_type = _element_type(value.type)
            if element_type is not None:
                types.add(element_type)
        for initializer in graph.initializer:
            types.add(initializer.data_type)
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.name in ("to", "output_dtype") and attribute.type == onnx.AttributeProto.INT:
                    types.add(attribute.i)
                if attribute.type == onnx.AttributeProto.TENSOR:
                    types.add(attribute.t.data_type)
    return types


def skip_reason(case: ConformanceCase) -> str | None:
    """Why kiln does not run `case`, or None when it must pass."""
    if case.name in SKIPPED_CASES:
        return SKIPPED_CASES[case.name]
    for graph in _graphs(case.model.graph):
        for node in graph.node:
            if node.domain in UNSUPPORTED_DOMAINS:
                return UNSUPPORTED_DOMAINS[node.domain]
            if node.op_type in UNSUPPORTED_OPERATORS and node.domain in ("", "ai.onnx"):
                return f"{node.op_type}: {UNSUPPORTED_OPERATORS[node.op_type]}"
    types = _element_types(case.model)
    if -1 in types:
        return _MAPS
    for element_type in sorted(types & set(UNSUPPORTED_ELEMENT_TYPES)):
        return UNSUPPORTED_ELEMENT_TYPES[element_type]
    for inputs, _ in case.data_sets:
        if any(
            (isinstance(value, np.ndarray) and value.dtype.kind == "O") or isinstance(value, dict) for value in inputs
        ):
            return "the case's data are object arrays or maps (no numeric dtype to feed)"
    return None


_CASES = conformance_cases()


@pytest.mark.parametrize("name", list(_CASES))
def test_node_case(name: str) -> None:
    case = _CASES[name]
    reason = skip_reason(case)
    if reason is not None:
        pytest.skip(reason)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run_case_with_kiln(case)


@pytest.mark.parametrize("op_type", sorted(UNSUPPORTED_OPERATORS))
def test_skipped_operators_are_unsupported(op_type: str) -> None:
    assert op_type not in OPERATORS, f"{op_type} has a rule now: take it off UNSUPPORTED_OPERATORS"


def test_cases_skipped_for_their_operators_or_types_fail_at_load() -> None:
    """A case skipped for an operator, domain or element type kiln lacks must really be refused at load (an
    operator that onnx defines as a function of supported ones runs through its expansion, so it may not be
    listed)."""
    loaded = []
    for name, case in _CASES.items():
        reason = skip_reason(case)
        if reason is None or name in SKIPPED_CASES or reason.startswith("the case's data"):
            continue
        try:
            OnnxRunner(case.model)
        except (NotImplementedError, ValueError):
            continue
        loaded.append(name)
    assert not loaded, f"skipped, yet these load: {loaded}"


def test_most_cases_run() -> None:
    """The skip list stays a list of exceptions: most of onnx's cases run."""
    running = [name for name, case in _CASES.items() if skip_reason(case) is None]
    assert len(running) >= 1600, f"only {len(running)} of {len(_CASES)} cases run"
