"""The case table of `kiln.tensor.nn.functional` and the `kiln.tensor.nn` modules of issue 38, shared by the torch
recorder (`record_functional.py`) and the kiln replays (`packages/tensor/tests/test_nn_functional.py`,
`test_nn_modules_torch.py`). It imports neither torch nor kiln.

A case calls `F.<name>(*inputs, **kwargs)` (`call` "F.<name>") or builds a module `nn.<Name>(**init)` (`call`
"nn.<Name>", or "nn.<Name>.<classmethod>") and calls it on the inputs. A keyword value `Ref(i)` stands for
inputs[i] (taken out of the positional list). The recorder stores the inputs, every output, the gradients of
sum(output * upstream) for a random upstream with respect to each floating input (and, for a module, each
parameter), a module's state-dict names and values after the call, and (`mutates`) the inputs after the call.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CASES", "Case", "In", "Ref"]

F32 = ("float32",)
F32_64 = ("float32", "float64")


@dataclass(frozen=True)
class Ref:
    """A keyword argument that is the case's input number `index`."""

    index: int


@dataclass(frozen=True)
class In:
    """One input: its shape, its kind of values, its dtype (None: the case's dtype) and whether it gets a gradient.

    Kinds: 'normal', 'wide' (normal times 4: reaches relu6's and hardswish's kinks), 'distinct' (a shuffled grid of
    distinct values: max pooling has no ties), 'prob' (uniform in [0.05, 0.95]), 'positive' (uniform in [0.5, 2]),
    'sign' (-1 or 1), 'simplex' (rows along dim 1 summing to 1), ('index', low, high) (int64 in [low, high)),
    'bool' (True with probability 0.7, the last dim's first entry True), ('fixed', values) (exactly these int64
    values, e.g. the offsets of `embedding_bag`), 'log_probs' (log_softmax of normal values along the last dim).
    """

    shape: tuple[int, ...]
    kind: Any = "normal"
    dtype: str | None = None
    grad: bool = True


@dataclass(frozen=True)
class Case:
    """One case in each of `dtypes`; `init` holds a module's constructor arguments, `eval` puts it in eval mode."""

    name: str
    call: str
    inputs: tuple[In, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    dtypes: tuple[str, ...] = F32
    init: dict[str, Any] = field(default_factory=dict)
    eval: bool = False
    mutates: bool = False

    def key(self, dtype: str) -> str:
        """The fixture key prefix of this case in `dtype`."""
        return f"{self.name}[{dtype}]"


def _x(*shape: int, kind: Any = "normal", grad: bool = True) -> In:
    return In(tuple(shape), kind, None, grad)


def _fixed(*values: int) -> In:
    return In((len(values),), ("fixed", values), "int64", False)


def _index(*shape: int, high: int, low: int = 0) -> In:
    return In(tuple(shape), ("index", low, high), "int64", False)


def _activation_cases() -> list[Case]:
    x, wide = _x(3, 5, 4), _x(2, 7, 3, kind="wide")
    cases = [
        Case("relu", "F.relu", (x,)),
        Case("relu6", "F.relu6", (wide,)),
        Case("leaky_relu", "F.leaky_relu", (x,), {"negative_slope": 0.2}, F32_64),
        Case("elu", "F.elu", (x,), {"alpha": 0.7}),
        Case("selu", "F.selu", (x,)),
        Case("celu", "F.celu", (x,), {"alpha": 1.5}),
        Case("gelu", "F.gelu", (x,), {}, F32_64),
        Case("gelu_tanh", "F.gelu", (wide,), {"approximate": "tanh"}),
        Case("silu", "F.silu", (x,)),
        Case("mish", "F.mish", (wide,)),
        Case("softplus", "F.softplus", (wide,), {"beta": 2.0, "threshold": 3.0}),
        Case("softsign", "F.softsign", (x,)),
        Case("hardswish", "F.hardswish", (wide,)),
        Case("hardsigmoid", "F.hardsigmoid", (wide,)),
        Case("hardtanh", "F.hardtanh", (x,), {"min_val": -0.5, "max_val": 0.8}),
        Case("sigmoid", "F.sigmoid", (x,)),
        Case("tanh", "F.tanh", (x,)),
        Case("logsigmoid", "F.logsigmoid", (wide,)),
        Case("hardshrink", "F.hardshrink", (x,), {"lambd": 0.3}),
        Case("softshrink", "F.softshrink", (x,), {"lambd": 0.4}),
        Case("tanhshrink", "F.tanhshrink", (x,)),
        Case("threshold", "F.threshold", (x,), {"threshold": 0.1, "value": -2.0}),
        Case("prelu", "F.prelu", (_x(2, 3, 4), _x(3))),
        Case("softmax", "F.softmax", (x,), {"dim": 1}, F32_64),
        Case("softmax_implicit_dim", "F.softmax", (_x(4, 6),)),
        Case("log_softmax", "F.log_softmax", (x,), {"dim": -1}),
        Case("softmin", "F.softmin", (x,), {"dim": 0}),
        Case("glu", "F.glu", (_x(3, 6, 2),), {"dim": 1}),
        Case("glu_last", "F.glu", (_x(5, 4),)),
    ]
    modules = [
        Case("m_relu", "nn.ReLU", (x,)),
        Case("m_relu6", "nn.ReLU6", (wide,)),
        Case("m_leaky_relu", "nn.LeakyReLU", (x,), init={"negative_slope": 0.1}),
        Case("m_elu", "nn.ELU", (x,), init={"alpha": 0.5}),
        Case("m_selu", "nn.SELU", (x,)),
        Case("m_celu", "nn.CELU", (x,), init={"alpha": 2.0}),
        Case("m_gelu", "nn.GELU", (x,), init={"approximate": "tanh"}),
        Case("m_silu", "nn.SiLU", (x,)),
        Case("m_mish", "nn.Mish", (wide,)),
        Case("m_softplus", "nn.Softplus", (wide,), init={"beta": 0.5, "threshold": 4.0}),
        Case("m_softsign", "nn.Softsign", (x,)),
        Case("m_hardswish", "nn.Hardswish", (wide,)),
        Case("m_hardsigmoid", "nn.Hardsigmoid", (wide,)),
        Case("m_hardtanh", "nn.Hardtanh", (wide,), init={"min_val": -2.0, "max_val": 3.0}),
        Case("m_hardshrink", "nn.Hardshrink", (x,), init={"lambd": 0.2}),
        Case("m_softshrink", "nn.Softshrink", (x,)),
        Case("m_tanhshrink", "nn.Tanhshrink", (x,)),
        Case("m_threshold", "nn.Threshold", (x,), init={"threshold": 0.2, "value": 5.0}),
        Case("m_logsigmoid", "nn.LogSigmoid", (x,)),
        Case("m_sigmoid", "nn.Sigmoid", (x,)),
        Case("m_tanh", "nn.Tanh", (x,)),
        Case("m_softmax", "nn.Softmax", (x,), init={"dim": 2}),
        Case("m_log_softmax", "nn.LogSoftmax", (x,), init={"dim": 1}),
        Case("m_softmin", "nn.Softmin", (x,), init={"dim": -1}),
        Case("m_glu", "nn.GLU", (_x(4, 6),), init={"dim": 1}),
        Case("m_prelu", "nn.PReLU", (_x(2, 3, 5),), init={"num_parameters": 3, "init": 0.1}),
        Case("m_prelu_one", "nn.PReLU", (_x(4, 5),)),
    ]
    return cases + modules


def _layer_cases() -> list[Case]:
    return [
        Case("normalize", "F.normalize", (_x(3, 5),), {"p": 1.0, "dim": -1}),
        Case("normalize_default", "F.normalize", (_x(2, 4, 3),), {}, F32_64),
        Case("linear", "F.linear", (_x(2, 3, 4), _x(5, 4), _x(5)), {}, F32_64),
        Case("bilinear", "F.bilinear", (_x(3, 4), _x(3, 5), _x(2, 4, 5), _x(2)), {}, F32_64),
        Case("bilinear_batched", "F.bilinear", (_x(2, 3, 4), _x(2, 3, 2), _x(3, 4, 2))),
        Case("embedding", "F.embedding", (_index(2, 5, high=7), _x(7, 3))),
        Case("embedding_padding", "F.embedding", (_index(3, 4, high=6), _x(6, 2)), {"padding_idx": 2}),
        Case("embedding_negative_padding", "F.embedding", (_index(9, high=5), _x(5, 3)), {"padding_idx": -1}),
        Case("embedding_freq", "F.embedding", (_index(4, 3, high=4), _x(4, 2)), {"scale_grad_by_freq": True}),
        Case(
            "embedding_max_norm",
            "F.embedding",
            (_index(2, 3, high=6), _x(6, 4, kind="wide", grad=False)),
            {"max_norm": 1.5, "norm_type": 1.0},
            mutates=True,
        ),
        Case("one_hot", "F.one_hot", (_index(2, 3, high=5),), {"num_classes": 6}),
        Case("one_hot_implicit", "F.one_hot", (_index(7, high=4),)),
        Case(
            "layer_norm",
            "F.layer_norm",
            (_x(2, 3, 4), _x(3, 4), _x(3, 4)),
            {"normalized_shape": (3, 4), "weight": Ref(1), "bias": Ref(2)},
            F32_64,
        ),
        Case(
            "group_norm",
            "F.group_norm",
            (_x(2, 6, 5), _x(6), _x(6)),
            {"num_groups": 3, "weight": Ref(1), "bias": Ref(2), "eps": 1e-3},
        ),
        Case("rms_norm", "F.rms_norm", (_x(3, 8), _x(8)), {"normalized_shape": (8,), "weight": Ref(1)}),
        Case(
            "batch_norm_train",
            "F.batch_norm",
            (_x(4, 3, 5), _x(3, grad=False), _x(3, kind="positive", grad=False), _x(3), _x(3)),
            {"training": True, "momentum": 0.3},
            mutates=True,
        ),
        Case("batch_norm_eval", "F.batch_norm", (_x(4, 3), _x(3, grad=False), _x(3, kind="positive", grad=False))),
        Case("instance_norm", "F.instance_norm", (_x(2, 3, 6),), {}, F32_64),
        Case(
            "instance_norm_affine_2d",
            "F.instance_norm",
            (_x(2, 3, 4, 5), _x(3), _x(3)),
            {"weight": Ref(1), "bias": Ref(2), "eps": 1e-3},
        ),
        Case(
            "instance_norm_running",
            "F.instance_norm",
            (_x(3, 2, 7), _x(2, grad=False), _x(2, kind="positive", grad=False)),
            {"running_mean": Ref(1), "running_var": Ref(2), "momentum": 0.2},
            mutates=True,
        ),
        Case(
            "instance_norm_running_stats",
            "F.instance_norm",
            (_x(2, 2, 5), _x(2, grad=False), _x(2, kind="positive", grad=False)),
            {"running_mean": Ref(1), "running_var": Ref(2), "use_input_stats": False},
        ),
        Case("cosine_similarity", "F.cosine_similarity", (_x(3, 5, 2), _x(3, 5, 2)), {}, F32_64),
        Case("cosine_similarity_dim", "F.cosine_similarity", (_x(4, 6), _x(1, 6)), {"dim": -1, "eps": 1e-6}),
        Case("pairwise_distance", "F.pairwise_distance", (_x(4, 6), _x(4, 6))),
        Case("pairwise_distance_p1", "F.pairwise_distance", (_x(3, 5), _x(3, 5)), {"p": 1.0, "keepdim": True}),
        Case("sdpa", "F.scaled_dot_product_attention", (_x(2, 3, 5, 4), _x(2, 3, 6, 4), _x(2, 3, 6, 3)), {}, F32_64),
        Case(
            "sdpa_causal_scale",
            "F.scaled_dot_product_attention",
            (_x(1, 2, 5, 4), _x(1, 2, 5, 4), _x(1, 2, 5, 4)),
            {"is_causal": True, "scale": 0.3},
        ),
        Case(
            "sdpa_bool_mask",
            "F.scaled_dot_product_attention",
            (_x(2, 4, 3), _x(2, 5, 3), _x(2, 5, 2), In((4, 5), "bool", "bool", False)),
            {"attn_mask": Ref(3)},
        ),
        Case(
            "sdpa_float_mask",
            "F.scaled_dot_product_attention",
            (_x(2, 2, 4, 3), _x(2, 2, 4, 3), _x(2, 2, 4, 3), _x(2, 1, 4, 4)),
            {"attn_mask": Ref(3)},
        ),
        Case(
            "sdpa_gqa",
            "F.scaled_dot_product_attention",
            (_x(1, 4, 3, 2), _x(1, 2, 5, 2), _x(1, 2, 5, 2)),
            {"enable_gqa": True, "is_causal": True},
        ),
    ]


def _spatial_cases() -> list[Case]:
    d = "distinct"
    return [
        Case("conv1d", "F.conv1d", (_x(2, 4, 9), _x(6, 2, 3), _x(6)), {"stride": 2, "padding": 1, "groups": 2}),
        Case("conv2d", "F.conv2d", (_x(1, 3, 7, 6), _x(4, 3, 3, 2)), {"padding": "same", "dilation": (2, 1)}, F32_64),
        Case("conv3d", "F.conv3d", (_x(1, 2, 4, 5, 4), _x(3, 2, 2, 2, 2), _x(3)), {"stride": (1, 2, 1)}),
        Case(
            "conv_transpose1d",
            "F.conv_transpose1d",
            (_x(2, 3, 5), _x(3, 2, 3), _x(2)),
            {"stride": 2, "padding": 1, "output_padding": 1},
        ),
        Case("conv_transpose2d", "F.conv_transpose2d", (_x(1, 4, 3, 4), _x(4, 1, 3, 3)), {"stride": 2, "groups": 2}),
        Case("avg_pool1d", "F.avg_pool1d", (_x(2, 3, 9),), {"kernel_size": 3, "stride": 2, "padding": 1}),
        Case(
            "avg_pool2d",
            "F.avg_pool2d",
            (_x(1, 2, 7, 6),),
            {"kernel_size": (3, 2), "padding": 1, "ceil_mode": True, "count_include_pad": False},
        ),
        Case("avg_pool2d_divisor", "F.avg_pool2d", (_x(1, 2, 6, 6),), {"kernel_size": 2, "divisor_override": 3}),
        Case("max_pool1d", "F.max_pool1d", (_x(2, 3, 10, kind=d),), {"kernel_size": 3, "stride": 2}),
        Case(
            "max_pool2d_indices",
            "F.max_pool2d",
            (_x(1, 2, 7, 7, kind=d),),
            {"kernel_size": 3, "stride": 2, "padding": 1, "return_indices": True},
        ),
        Case("max_pool2d_dilation", "F.max_pool2d", (_x(2, 1, 8, 8, kind=d),), {"kernel_size": 2, "dilation": 2}),
        Case("adaptive_avg_pool1d", "F.adaptive_avg_pool1d", (_x(2, 3, 10),), {"output_size": 4}),
        Case("adaptive_avg_pool2d", "F.adaptive_avg_pool2d", (_x(2, 3, 7, 5),), {"output_size": (3, None)}),
        Case("adaptive_avg_pool2d_one", "F.adaptive_avg_pool2d", (_x(2, 4, 5, 5),), {"output_size": 1}),
        Case("adaptive_max_pool2d", "F.adaptive_max_pool2d", (_x(1, 2, 7, 6, kind=d),), {"output_size": (2, 4)}),
        Case("pad_constant", "F.pad", (_x(2, 3, 4),), {"pad": (1, 2, 0, 1), "value": 1.5}),
        Case("pad_reflect", "F.pad", (_x(1, 2, 5, 4),), {"pad": (2, 1, 3, 0), "mode": "reflect"}),
        Case("pad_replicate", "F.pad", (_x(2, 3, 5),), {"pad": (3, 1), "mode": "replicate"}),
        Case("pad_circular", "F.pad", (_x(1, 2, 4, 5),), {"pad": (1, 2, 2, 1), "mode": "circular"}),
        Case("pad_negative", "F.pad", (_x(2, 6, 5),), {"pad": (-1, 2, 1, -2)}),
        Case("interpolate_nearest", "F.interpolate", (_x(1, 2, 3, 4),), {"scale_factor": 2}),
        Case("interpolate_nearest_size", "F.interpolate", (_x(2, 1, 5, 3),), {"size": (3, 7)}),
        Case(
            "interpolate_bilinear",
            "F.interpolate",
            (_x(1, 2, 4, 5),),
            {"size": (7, 3), "mode": "bilinear", "align_corners": False},
            F32_64,
        ),
        Case(
            "interpolate_bilinear_corners",
            "F.interpolate",
            (_x(2, 1, 3, 4),),
            {"scale_factor": 2.5, "mode": "bilinear", "align_corners": True},
        ),
        Case("interpolate_linear", "F.interpolate", (_x(2, 3, 5),), {"size": 8, "mode": "linear"}),
        Case("pixel_shuffle", "F.pixel_shuffle", (_x(2, 8, 3, 2),), {"upscale_factor": 2}),
        Case("pixel_shuffle_3d", "F.pixel_shuffle", (_x(9, 2, 3),), {"upscale_factor": 3}),
        Case("pixel_unshuffle", "F.pixel_unshuffle", (_x(1, 2, 4, 6),), {"downscale_factor": 2}),
        Case("unfold", "F.unfold", (_x(2, 3, 5, 6),), {"kernel_size": (2, 3), "padding": 1, "stride": (1, 2)}),
        Case("unfold_dilation", "F.unfold", (_x(2, 6, 7),), {"kernel_size": 2, "dilation": 2}),
        Case(
            "fold",
            "F.fold",
            (_x(2, 12, 15),),
            {"output_size": (4, 5), "kernel_size": (2, 3), "padding": 1, "stride": (1, 2)},
        ),
        Case("fold_overlap", "F.fold", (_x(4, 9),), {"output_size": 4, "kernel_size": 2}),
        Case("m_upsample", "nn.Upsample", (_x(1, 2, 3, 3),), init={"scale_factor": 2, "mode": "bilinear"}),
        Case("m_upsample_nearest", "nn.UpsamplingNearest2d", (_x(1, 1, 2, 3),), init={"size": (4, 5)}),
        Case("m_upsample_bilinear", "nn.UpsamplingBilinear2d", (_x(1, 2, 3, 2),), init={"scale_factor": 2}),
        Case("m_pixel_shuffle", "nn.PixelShuffle", (_x(1, 4, 2, 3),), init={"upscale_factor": 2}),
        Case("m_pixel_unshuffle", "nn.PixelUnshuffle", (_x(1, 1, 4, 4),), init={"downscale_factor": 2}),
        Case("m_unflatten", "nn.Unflatten", (_x(2, 12),), init={"dim": 1, "unflattened_size": (3, 4)}),
        Case("m_zero_pad2d", "nn.ZeroPad2d", (_x(1, 2, 3, 3),), init={"padding": (1, 0, 2, 1)}),
        Case("m_zero_pad1d", "nn.ZeroPad1d", (_x(2, 3),), init={"padding": 2}),
        Case("m_constant_pad1d", "nn.ConstantPad1d", (_x(2, 2, 3),), init={"padding": (1, 2), "value": -1.0}),
        Case("m_constant_pad2d", "nn.ConstantPad2d", (_x(1, 2, 2, 2),), init={"padding": 1, "value": 3.0}),
        Case("m_reflection_pad1d", "nn.ReflectionPad1d", (_x(1, 2, 5),), init={"padding": 2}),
        Case("m_reflection_pad2d", "nn.ReflectionPad2d", (_x(1, 1, 4, 4),), init={"padding": (1, 2, 0, 3)}),
        Case("m_replication_pad1d", "nn.ReplicationPad1d", (_x(2, 1, 3),), init={"padding": (2, 1)}),
        Case("m_replication_pad2d", "nn.ReplicationPad2d", (_x(1, 2, 3, 3),), init={"padding": 2}),
        Case("m_circular_pad2d", "nn.CircularPad2d", (_x(1, 1, 3, 4),), init={"padding": 1}),
        Case("m_adaptive_avg_pool1d", "nn.AdaptiveAvgPool1d", (_x(2, 3, 7),), init={"output_size": 3}),
        Case("m_adaptive_avg_pool2d", "nn.AdaptiveAvgPool2d", (_x(2, 3, 5, 7),), init={"output_size": (1, 1)}),
        Case("m_adaptive_max_pool2d", "nn.AdaptiveMaxPool2d", (_x(1, 2, 6, 5, kind=d),), init={"output_size": 2}),
        Case("m_dropout_eval", "nn.Dropout2d", (_x(2, 3, 4, 4),), init={"p": 0.5}, eval=True),
        Case("m_instance_norm1d", "nn.InstanceNorm1d", (_x(2, 3, 6),), init={"num_features": 3}),
        Case(
            "m_instance_norm2d_affine",
            "nn.InstanceNorm2d",
            (_x(2, 3, 4, 3),),
            init={"num_features": 3, "affine": True, "track_running_stats": True, "momentum": 0.3},
        ),
        Case(
            "m_instance_norm2d_unbatched",
            "nn.InstanceNorm2d",
            (_x(2, 3, 5),),
            init={"num_features": 2, "affine": True, "eps": 1e-3},
        ),
        Case(
            "m_embedding_pretrained",
            "nn.Embedding.from_pretrained",
            (_index(2, 3, high=5), _x(5, 4, grad=False)),
            init={"embeddings": Ref(1), "freeze": False, "padding_idx": 0},
        ),
        Case(
            "m_embedding_frozen",
            "nn.Embedding.from_pretrained",
            (_index(4, high=3), _x(3, 2, grad=False)),
            init={"embeddings": Ref(1)},
        ),
    ]


def _loss_cases() -> list[Case]:
    logits, classes = _x(5, 4), _index(5, high=4)
    return [
        Case("cross_entropy", "F.cross_entropy", (logits, classes), {}, F32_64),
        Case(
            "cross_entropy_weight_ignore",
            "F.cross_entropy",
            (_x(6, 3), _index(6, high=3), _x(3, kind="positive", grad=False)),
            {"weight": Ref(2), "ignore_index": 1},
        ),
        Case(
            "cross_entropy_smooth", "F.cross_entropy", (logits, classes), {"label_smoothing": 0.2, "reduction": "sum"}
        ),
        Case(
            "cross_entropy_smooth_weight",
            "F.cross_entropy",
            (_x(4, 3), _index(4, high=3), _x(3, kind="positive", grad=False)),
            {"weight": Ref(2), "label_smoothing": 0.1},
        ),
        Case("cross_entropy_probs", "F.cross_entropy", (_x(4, 5), _x(4, 5, kind="simplex")), {"label_smoothing": 0.1}),
        Case("cross_entropy_kdim", "F.cross_entropy", (_x(2, 3, 4, 2), _index(2, 4, 2, high=3)), {"reduction": "none"}),
        Case("nll_loss", "F.nll_loss", (_x(5, 3), _index(5, high=3)), {"ignore_index": 0}),
        Case(
            "nll_loss_weight",
            "F.nll_loss",
            (_x(4, 3, 2), _index(4, 2, high=3), _x(3, kind="positive", grad=False)),
            {"weight": Ref(2)},
        ),
        Case("mse_loss", "F.mse_loss", (_x(3, 4), _x(3, 4)), {}, F32_64),
        Case("mse_loss_sum", "F.mse_loss", (_x(3, 4), _x(3, 4)), {"reduction": "sum"}),
        Case("mse_loss_legacy", "F.mse_loss", (_x(2, 5), _x(2, 5)), {"size_average": False}),
        Case("mse_loss_weight", "F.mse_loss", (_x(3, 4), _x(3, 4), _x(3, 4, kind="positive")), {"weight": Ref(2)}),
        Case("l1_loss", "F.l1_loss", (_x(4, 3), _x(4, 3)), {"reduction": "none"}),
        Case("l1_loss_weight", "F.l1_loss", (_x(2, 6), _x(2, 6), _x(2, 6, kind="positive")), {"weight": Ref(2)}),
        Case("smooth_l1_loss", "F.smooth_l1_loss", (_x(4, 5, kind="wide"), _x(4, 5)), {"beta": 0.5}),
        Case("huber_loss", "F.huber_loss", (_x(4, 5, kind="wide"), _x(4, 5)), {"delta": 1.5}),
        Case(
            "huber_loss_weight",
            "F.huber_loss",
            (_x(3, 4, kind="wide"), _x(3, 4), _x(3, 4, kind="positive")),
            {"weight": Ref(2), "delta": 0.7},
        ),
        Case("bce", "F.binary_cross_entropy", (_x(3, 4, kind="prob"), _x(3, 4, kind="prob")), {}, F32_64),
        Case(
            "bce_weight",
            "F.binary_cross_entropy",
            (_x(6, kind="prob"), _x(6, kind="prob"), _x(6, kind="positive", grad=False)),
            {"weight": Ref(2), "reduction": "sum"},
        ),
        Case("bce_logits", "F.binary_cross_entropy_with_logits", (_x(3, 5, kind="wide"), _x(3, 5, kind="prob"))),
        Case(
            "bce_logits_pos_weight",
            "F.binary_cross_entropy_with_logits",
            (_x(4, 3), _x(4, 3, kind="prob"), _x(3, kind="positive", grad=False)),
            {"pos_weight": Ref(2)},
        ),
        Case("kl_div", "F.kl_div", (_x(3, 4), _x(3, 4, kind="prob")), {"reduction": "batchmean"}),
        Case("kl_div_log_target", "F.kl_div", (_x(3, 4), _x(3, 4)), {"log_target": True, "reduction": "sum"}),
        Case(
            "cosine_embedding_loss",
            "F.cosine_embedding_loss",
            (_x(5, 4), _x(5, 4), _x(5, kind="sign", grad=False)),
            {"margin": 0.2},
        ),
        Case(
            "margin_ranking_loss",
            "F.margin_ranking_loss",
            (_x(6), _x(6), _x(6, kind="sign", grad=False)),
            {"margin": 0.3},
        ),
        Case(
            "hinge_embedding_loss",
            "F.hinge_embedding_loss",
            (_x(3, 4), _x(3, 4, kind="sign", grad=False)),
            {"margin": 0.5},
        ),
        Case("triplet_margin_loss", "F.triplet_margin_loss", (_x(4, 5), _x(4, 5), _x(4, 5))),
        Case(
            "triplet_margin_loss_swap",
            "F.triplet_margin_loss",
            (_x(3, 4), _x(3, 4), _x(3, 4)),
            {"swap": True, "p": 1, "margin": 2.0},
        ),
        Case("soft_margin_loss", "F.soft_margin_loss", (_x(3, 4), _x(3, 4, kind="sign", grad=False))),
        Case("poisson_nll_loss", "F.poisson_nll_loss", (_x(3, 4), _x(3, 4, kind="positive"))),
        Case(
            "poisson_nll_loss_full",
            "F.poisson_nll_loss",
            (_x(3, 4, kind="positive"), _x(3, 4, kind="positive")),
            {"log_input": False, "full": True},
        ),
        Case("gaussian_nll_loss", "F.gaussian_nll_loss", (_x(4, 3), _x(4, 3), _x(4, 1, kind="positive"))),
        Case(
            "gaussian_nll_loss_full",
            "F.gaussian_nll_loss",
            (_x(5, 2), _x(5, 2), _x(5, 2, kind="prob")),
            {"full": True, "eps": 0.2, "reduction": "sum"},
        ),
        Case("m_cross_entropy", "nn.CrossEntropyLoss", (logits, classes), init={"label_smoothing": 0.05}),
        Case(
            "m_cross_entropy_weight",
            "nn.CrossEntropyLoss",
            (_x(6, 3), _index(6, high=3), _x(3, kind="positive", grad=False)),
            init={"weight": Ref(2), "ignore_index": 0, "reduction": "sum"},
        ),
        Case("m_nll", "nn.NLLLoss", (_x(4, 3), _index(4, high=3)), init={"reduction": "none"}),
        Case("m_mse", "nn.MSELoss", (_x(3, 4), _x(3, 4))),
        Case("m_l1", "nn.L1Loss", (_x(3, 4), _x(3, 4)), init={"reduction": "sum"}),
        Case("m_smooth_l1", "nn.SmoothL1Loss", (_x(3, 4, kind="wide"), _x(3, 4)), init={"beta": 2.0}),
        Case("m_huber", "nn.HuberLoss", (_x(3, 4, kind="wide"), _x(3, 4)), init={"delta": 0.5}),
        Case("m_bce", "nn.BCELoss", (_x(4, kind="prob"), _x(4, kind="prob"))),
        Case(
            "m_bce_logits",
            "nn.BCEWithLogitsLoss",
            (_x(3, 2), _x(3, 2, kind="prob"), _x(2, kind="positive", grad=False)),
            init={"pos_weight": Ref(2)},
        ),
        Case("m_kl_div", "nn.KLDivLoss", (_x(2, 5), _x(2, 5, kind="prob")), init={"reduction": "batchmean"}),
        Case(
            "m_cosine_embedding",
            "nn.CosineEmbeddingLoss",
            (_x(4, 3), _x(4, 3), _x(4, kind="sign", grad=False)),
            init={"margin": -0.1},
        ),
        Case("m_margin_ranking", "nn.MarginRankingLoss", (_x(5), _x(5), _x(5, kind="sign", grad=False))),
        Case("m_hinge_embedding", "nn.HingeEmbeddingLoss", (_x(2, 3), _x(2, 3, kind="sign", grad=False))),
        Case("m_triplet_margin", "nn.TripletMarginLoss", (_x(3, 4), _x(3, 4), _x(3, 4)), init={"margin": 0.5}),
        Case("m_soft_margin", "nn.SoftMarginLoss", (_x(3, 2), _x(3, 2, kind="sign", grad=False))),
        Case("m_poisson_nll", "nn.PoissonNLLLoss", (_x(3, 2), _x(3, 2, kind="positive"))),
        Case("m_gaussian_nll", "nn.GaussianNLLLoss", (_x(3, 2), _x(3, 2), _x(3, 2, kind="positive"))),
    ]


def _more_cases() -> list[Case]:
    d, pos = "distinct", "positive"
    return [
        Case("local_response_norm", "F.local_response_norm", (_x(2, 5, 4),), {"size": 3}, F32_64),
        Case(
            "local_response_norm_4d",
            "F.local_response_norm",
            (_x(1, 6, 3, 3),),
            {"size": 2, "alpha": 0.1, "beta": 0.5, "k": 2.0},
        ),
        Case("lp_pool1d", "F.lp_pool1d", (_x(2, 3, 8, kind=pos),), {"norm_type": 2, "kernel_size": 3, "stride": 2}),
        Case("lp_pool2d", "F.lp_pool2d", (_x(1, 2, 6, 5, kind=pos),), {"norm_type": 3.0, "kernel_size": (2, 2)}),
        Case("max_pool2d_with_indices", "F.max_pool2d_with_indices", (_x(1, 2, 6, 6, kind=d),), {"kernel_size": 3}),
        Case(
            "adaptive_max_pool1d_with_indices",
            "F.adaptive_max_pool1d_with_indices",
            (_x(2, 2, 9, kind=d),),
            {"output_size": 4},
        ),
        Case("multilabel_soft_margin", "F.multilabel_soft_margin_loss", (_x(4, 5), _x(4, 5, kind="prob"))),
        Case(
            "multilabel_soft_margin_weight",
            "F.multilabel_soft_margin_loss",
            (_x(3, 4), _x(3, 4, kind="prob"), _x(4, kind=pos, grad=False)),
            {"weight": Ref(2), "reduction": "none"},
        ),
        Case("multi_margin", "F.multi_margin_loss", (_x(5, 4), _index(5, high=4)), {}, F32_64),
        Case(
            "multi_margin_p2_weight",
            "F.multi_margin_loss",
            (_x(6, 3), _index(6, high=3), _x(3, kind=pos, grad=False)),
            {"p": 2, "margin": 0.5, "weight": Ref(2), "reduction": "sum"},
        ),
        Case("multi_margin_1d", "F.multi_margin_loss", (_x(4), _index(high=4))),
        Case("multilabel_margin", "F.multilabel_margin_loss", (_x(5, 4), _index(5, 4, high=4, low=-1))),
        Case(
            "multilabel_margin_none",
            "F.multilabel_margin_loss",
            (_x(3, 6), _index(3, 6, high=6, low=-1)),
            {"reduction": "none"},
        ),
        Case("triplet_distance", "F.triplet_margin_with_distance_loss", (_x(4, 3), _x(4, 3), _x(4, 3))),
        Case(
            "triplet_distance_swap",
            "F.triplet_margin_with_distance_loss",
            (_x(3, 5), _x(3, 5), _x(3, 5)),
            {"swap": True, "margin": 0.4, "reduction": "none"},
        ),
        Case("channel_shuffle", "F.channel_shuffle", (_x(2, 6, 2, 2),), {"groups": 3}),
        Case("rrelu_eval", "F.rrelu", (_x(3, 4),), {"lower": 0.1, "upper": 0.5}),
        Case("alpha_dropout_eval", "F.alpha_dropout", (_x(3, 4),), {"p": 0.3}),
        Case("m_rrelu", "nn.RReLU", (_x(2, 5),), init={"lower": 0.2, "upper": 0.4}, eval=True),
        Case("m_softmax2d", "nn.Softmax2d", (_x(2, 3, 2, 2),)),
        Case("m_cosine_similarity", "nn.CosineSimilarity", (_x(3, 4), _x(3, 4)), init={"dim": 1}),
        Case("m_pairwise_distance", "nn.PairwiseDistance", (_x(3, 4), _x(3, 4)), init={"p": 3.0, "keepdim": True}),
        Case("m_unfold", "nn.Unfold", (_x(1, 2, 4, 4),), init={"kernel_size": 2, "stride": 2}),
        Case("m_fold", "nn.Fold", (_x(1, 8, 4),), init={"output_size": 4, "kernel_size": 2, "stride": 2}),
        Case("m_channel_shuffle", "nn.ChannelShuffle", (_x(1, 4, 3),), init={"groups": 2}),
        Case("m_lp_pool1d", "nn.LPPool1d", (_x(2, 2, 7, kind=pos),), init={"norm_type": 2, "kernel_size": 2}),
        Case("m_local_response_norm", "nn.LocalResponseNorm", (_x(2, 4, 3),), init={"size": 3}),
        Case("m_alpha_dropout_eval", "nn.AlphaDropout", (_x(3, 3),), init={"p": 0.2}, eval=True),
        Case("m_multilabel_soft_margin", "nn.MultiLabelSoftMarginLoss", (_x(3, 4), _x(3, 4, kind="prob"))),
        Case(
            "m_multi_margin",
            "nn.MultiMarginLoss",
            (_x(4, 3), _index(4, high=3), _x(3, kind=pos, grad=False)),
            init={"p": 2, "weight": Ref(2)},
        ),
        Case("m_multilabel_margin", "nn.MultiLabelMarginLoss", (_x(2, 5), _index(2, 5, high=5, low=-1))),
        Case("m_triplet_distance", "nn.TripletMarginWithDistanceLoss", (_x(3, 2), _x(3, 2), _x(3, 2))),
        Case("m_nll2d", "nn.NLLLoss2d", (_x(2, 3, 2, 2), _index(2, 2, 2, high=3))),
        Case("embedding_bag_2d", "F.embedding_bag", (_index(3, 4, high=6), _x(6, 3))),
        Case(
            "embedding_bag_sum_weights",
            "F.embedding_bag",
            (_index(7, high=5), _x(5, 2), _fixed(0, 2, 2, 5), _x(7)),
            {"offsets": Ref(2), "mode": "sum", "per_sample_weights": Ref(3)},
        ),
        Case(
            "embedding_bag_max_padding",
            "F.embedding_bag",
            (_index(8, high=4), _x(4, 3), _fixed(0, 3, 3, 6, 8)),
            {"offsets": Ref(2), "mode": "max", "padding_idx": 2, "include_last_offset": True},
        ),
        Case(
            "embedding_bag_mean_padding",
            "F.embedding_bag",
            (_index(4, 3, high=3), _x(3, 2)),
            # not scale_grad_by_freq: torch's CPU embedding_bag divides some rows' gradients by the wrong count
            {"padding_idx": 0},
        ),
        Case("affine_grid", "F.affine_grid", (_x(2, 2, 3),), {"size": (2, 3, 4, 5), "align_corners": False}, F32_64),
        Case("affine_grid_corners", "F.affine_grid", (_x(1, 2, 3),), {"size": (1, 1, 3, 2), "align_corners": True}),
        Case(
            "grid_sample",
            "F.grid_sample",
            (_x(2, 3, 4, 5), _x(2, 3, 6, 2)),
            {"align_corners": False},
            F32_64,
        ),
        Case(
            "grid_sample_border_corners",
            "F.grid_sample",
            (_x(1, 2, 5, 3), _x(1, 4, 4, 2)),
            {"padding_mode": "border", "align_corners": True},
        ),
        Case(
            "grid_sample_reflection",
            "F.grid_sample",
            (_x(2, 1, 3, 4), In((2, 5, 2, 2), "wide")),
            {"padding_mode": "reflection", "align_corners": False},
        ),
        Case(
            "grid_sample_reflection_corners",
            "F.grid_sample",
            (_x(1, 2, 4, 4), In((1, 3, 3, 2), "wide")),
            {"padding_mode": "reflection", "align_corners": True},
        ),
        Case("affine_grid_3d", "F.affine_grid", (_x(2, 3, 4),), {"size": (2, 1, 2, 3, 4), "align_corners": False}),
        Case(
            "grid_sample_3d",
            "F.grid_sample",
            (_x(1, 2, 3, 4, 3), _x(1, 2, 3, 2, 3)),
            {"align_corners": False},
            F32_64,
        ),
        Case(
            "grid_sample_3d_reflection_nearest",
            "F.grid_sample",
            (_x(2, 1, 2, 3, 4), In((2, 1, 2, 3, 3), "wide")),
            {"mode": "nearest", "padding_mode": "reflection", "align_corners": True},
        ),
        Case(
            "grid_sample_3d_border",
            "F.grid_sample",
            (_x(1, 1, 3, 3, 2), In((1, 2, 2, 2, 3), "wide")),
            {"padding_mode": "border", "align_corners": True},
        ),
        Case(
            "grid_sample_nearest",
            "F.grid_sample",
            (_x(1, 2, 4, 6), _x(1, 5, 3, 2)),
            {"mode": "nearest", "align_corners": False},
        ),
        Case(
            "ctc_loss",
            "F.ctc_loss",
            (In((7, 3, 5), "log_probs"), _index(3, 4, high=5, low=1), _fixed(7, 6, 3), _fixed(3, 4, 1)),
            {},
            F32_64,
        ),
        Case(
            "ctc_loss_concatenated",
            "F.ctc_loss",
            (In((6, 2, 4), "log_probs"), _fixed(1, 1, 2, 3, 3), _fixed(6, 5), _fixed(3, 2)),
            {"reduction": "sum", "blank": 0},
        ),
        Case(
            "ctc_loss_blank_last_impossible",
            "F.ctc_loss",
            (In((4, 3, 4), "log_probs"), _fixed(0, 1, 1, 2, 0, 0, 1, 2, 2), _fixed(4, 2, 4), _fixed(3, 3, 3)),
            {"blank": 3, "reduction": "none", "zero_infinity": True},
        ),
        Case(
            "m_ctc",
            "nn.CTCLoss",
            (In((5, 2, 3), "log_probs"), _index(2, 2, high=3, low=1), _fixed(5, 4), _fixed(2, 1)),
        ),
        Case(
            "m_embedding_bag",
            "nn.EmbeddingBag.from_pretrained",
            (_index(6, high=5), _fixed(0, 1, 4), _x(5, 3, grad=False)),
            init={"embeddings": Ref(2), "freeze": False, "mode": "max"},
        ),
    ]


def _random_shape_cases(seed: int = 38, rounds: int = 2) -> list[Case]:
    """The same functions at shapes drawn by a seeded generator (the table, and so the fixture, stay fixed)."""
    draw = random.Random(seed)

    def shape(low_rank: int, high_rank: int, high: int = 5) -> tuple[int, ...]:
        return tuple(draw.randint(1, high) for _ in range(draw.randint(low_rank, high_rank)))

    cases: list[Case] = []
    for round_index in range(rounds):
        tag = f"rand{round_index}"
        x = shape(1, 4)
        for name, kwargs in (
            ("relu", {}), ("gelu", {"approximate": "tanh"}), ("silu", {}), ("mish", {}), ("elu", {"alpha": 0.5}),
            ("softplus", {"beta": 1.5}), ("hardswish", {}), ("leaky_relu", {"negative_slope": 0.3}),
            ("logsigmoid", {}), ("softsign", {}),
        ):  # fmt: skip
            cases.append(Case(f"{tag}_{name}", f"F.{name}", (In(x, "wide"),), kwargs))
        dim = draw.randrange(-len(x), len(x))
        cases.append(Case(f"{tag}_softmax", "F.softmax", (_x(*x),), {"dim": dim}))
        cases.append(Case(f"{tag}_log_softmax", "F.log_softmax", (_x(*x),), {"dim": dim}))
        cases.append(
            Case(f"{tag}_normalize", "F.normalize", (_x(*x),), {"dim": dim, "p": draw.choice([1.0, 2.0, 3.0])})
        )
        even = (*x[:-1], 2 * x[-1])
        cases.append(Case(f"{tag}_glu", "F.glu", (_x(*even),)))
        last = x[-draw.randint(1, len(x)) :]
        cases.append(
            Case(f"{tag}_layer_norm", "F.layer_norm", (_x(*x), In(last), In(last)),
                 {"normalized_shape": last, "weight": Ref(1), "bias": Ref(2)})
        )  # fmt: skip
        for loss in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"):
            cases.append(Case(f"{tag}_{loss}", f"F.{loss}", (In(x, "wide"), _x(*x)), {"reduction": "sum"}))
        cases.append(Case(f"{tag}_bce_logits", "F.binary_cross_entropy_with_logits", (In(x, "wide"), In(x, "prob"))))
        batch, classes = draw.randint(1, 6), draw.randint(2, 6)
        cases.append(
            Case(f"{tag}_cross_entropy", "F.cross_entropy", (_x(batch, classes), _index(batch, high=classes)),
                 {"label_smoothing": round(draw.uniform(0, 0.3), 2)})
        )  # fmt: skip
        cases.append(Case(f"{tag}_kl_div", "F.kl_div", (_x(batch, classes), _x(batch, classes, kind="prob"))))
        rows, width = draw.randint(1, 6), draw.randint(1, 6)
        cases.append(Case(f"{tag}_cosine_similarity", "F.cosine_similarity", (_x(rows, width), _x(rows, width))))
        cases.append(Case(f"{tag}_pairwise_distance", "F.pairwise_distance", (_x(rows, width), _x(rows, width))))
        n, c, h, w = draw.randint(1, 2), draw.randint(1, 3), draw.randint(2, 6), draw.randint(2, 6)
        image = _x(n, c, h, w)
        cases.append(Case(f"{tag}_instance_norm", "F.instance_norm", (image,)))
        cases.append(Case(f"{tag}_adaptive_avg_pool2d", "F.adaptive_avg_pool2d", (image,), {"output_size": (2, 3)}))
        cases.append(
            Case(f"{tag}_interpolate", "F.interpolate", (image,),
                 {"size": (draw.randint(1, 8), draw.randint(1, 8)), "mode": "bilinear",
                  "align_corners": draw.choice([True, False])})
        )  # fmt: skip
        k = draw.randint(1, min(h, w))
        cases.append(
            Case(f"{tag}_conv2d", "F.conv2d", (image, _x(draw.randint(1, 3), c, k, k)), {"padding": draw.randint(0, 1)})
        )
        cases.append(Case(f"{tag}_unfold", "F.unfold", (image,), {"kernel_size": k, "stride": draw.randint(1, 2)}))
        r = draw.randint(1, 2)
        cases.append(Case(f"{tag}_pixel_shuffle", "F.pixel_shuffle", (_x(n, c * r * r, h, w),), {"upscale_factor": r}))
    return cases


CASES: list[Case] = (
    _activation_cases() + _layer_cases() + _spatial_cases() + _loss_cases() + _more_cases() + _random_shape_cases()
)


# (module path, constructor arguments): torch's repr of each is recorded as `repr/<index>`
REPRS: list[tuple[str, dict[str, Any]]] = [
    ("nn.ReLU", {}),
    ("nn.ReLU", {"inplace": True}),
    ("nn.ReLU6", {}),
    ("nn.LeakyReLU", {"negative_slope": 0.2, "inplace": True}),
    ("nn.ELU", {}),
    ("nn.CELU", {"alpha": 0.5}),
    ("nn.SELU", {"inplace": True}),
    ("nn.GELU", {"approximate": "tanh"}),
    ("nn.SiLU", {}),
    ("nn.Mish", {}),
    ("nn.Softplus", {"beta": 2.0}),
    ("nn.Hardswish", {"inplace": True}),
    ("nn.Hardsigmoid", {}),
    ("nn.Hardtanh", {"min_val": -2.0, "max_val": 2.0}),
    ("nn.Hardshrink", {}),
    ("nn.Softshrink", {"lambd": 0.25}),
    ("nn.Threshold", {"threshold": 0.1, "value": 2}),
    ("nn.Softmax", {}),
    ("nn.LogSoftmax", {"dim": 1}),
    ("nn.Softmin", {"dim": -1}),
    ("nn.GLU", {}),
    ("nn.PReLU", {"num_parameters": 3}),
    ("nn.Tanhshrink", {}),
    ("nn.LogSigmoid", {}),
    ("nn.Softsign", {}),
    ("nn.Dropout", {}),
    ("nn.Dropout1d", {"p": 0.1}),
    ("nn.Dropout2d", {"p": 0.2, "inplace": True}),
    ("nn.Dropout3d", {}),
    ("nn.Upsample", {"scale_factor": 2}),
    ("nn.Upsample", {"size": 3, "mode": "bilinear"}),
    ("nn.Upsample", {"scale_factor": (2, 3), "mode": "nearest"}),
    ("nn.UpsamplingBilinear2d", {"scale_factor": 2}),
    ("nn.UpsamplingNearest2d", {"size": (4, 5)}),
    ("nn.PixelShuffle", {"upscale_factor": 2}),
    ("nn.PixelUnshuffle", {"downscale_factor": 3}),
    ("nn.Unflatten", {"dim": 1, "unflattened_size": (2, 3)}),
    ("nn.ZeroPad1d", {"padding": 2}),
    ("nn.ZeroPad2d", {"padding": 1}),
    ("nn.ZeroPad3d", {"padding": (1, 2, 3, 4, 5, 6)}),
    ("nn.ConstantPad1d", {"padding": 2, "value": 1.5}),
    ("nn.ConstantPad2d", {"padding": (1, 2, 3, 4), "value": 0.0}),
    ("nn.ReflectionPad2d", {"padding": (1, 2, 3, 4)}),
    ("nn.ReplicationPad1d", {"padding": 3}),
    ("nn.CircularPad2d", {"padding": 1}),
    ("nn.AdaptiveAvgPool1d", {"output_size": 3}),
    ("nn.AdaptiveAvgPool2d", {"output_size": 1}),
    ("nn.AdaptiveAvgPool2d", {"output_size": (2, None)}),
    ("nn.AdaptiveMaxPool2d", {"output_size": (2, 3)}),
    ("nn.AdaptiveMaxPool3d", {"output_size": 2}),
    ("nn.InstanceNorm1d", {"num_features": 3}),
    ("nn.InstanceNorm2d", {"num_features": 4, "affine": True, "track_running_stats": True}),
    ("nn.InstanceNorm3d", {"num_features": 2, "eps": 1e-3, "momentum": 0.2, "affine": True, "bias": False}),
    ("nn.Embedding", {"num_embeddings": 5, "embedding_dim": 3}),
    ("nn.Embedding", {"num_embeddings": 5, "embedding_dim": 3, "padding_idx": -2, "max_norm": 2.0}),
    ("nn.Embedding", {"num_embeddings": 4, "embedding_dim": 2, "norm_type": 1.0, "scale_grad_by_freq": True}),
    ("nn.CrossEntropyLoss", {}),
    ("nn.MSELoss", {}),
    ("nn.BCEWithLogitsLoss", {}),
    ("nn.TripletMarginLoss", {}),
    ("nn.Bilinear", {"in1_features": 2, "in2_features": 3, "out_features": 4}),
    ("nn.Bilinear", {"in1_features": 2, "in2_features": 3, "out_features": 1, "bias": False}),
    ("nn.CosineSimilarity", {}),
    ("nn.PairwiseDistance", {"p": 1.0}),
    ("nn.Softmax2d", {}),
    ("nn.Fold", {"output_size": 3, "kernel_size": 2}),
    ("nn.Unfold", {"kernel_size": (2, 3), "dilation": 2}),
    ("nn.ChannelShuffle", {"groups": 2}),
    ("nn.MaxUnpool1d", {"kernel_size": 2}),
    ("nn.MaxUnpool2d", {"kernel_size": 2}),
    ("nn.MaxUnpool3d", {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("nn.LPPool2d", {"norm_type": 2, "kernel_size": 3}),
    ("nn.LPPool1d", {"norm_type": 1.5, "kernel_size": 2, "stride": 1, "ceil_mode": True}),
    ("nn.AlphaDropout", {}),
    ("nn.FeatureAlphaDropout", {"p": 0.1}),
    ("nn.LocalResponseNorm", {"size": 3}),
    ("nn.RReLU", {}),
    ("nn.RReLU", {"lower": 0.1, "upper": 0.2, "inplace": True}),
    ("nn.MultiMarginLoss", {}),
    ("nn.TripletMarginWithDistanceLoss", {}),
    ("nn.EmbeddingBag", {"num_embeddings": 5, "embedding_dim": 3}),
    ("nn.CTCLoss", {"blank": 2, "zero_infinity": True}),
    ("nn.EmbeddingBag", {"num_embeddings": 5, "embedding_dim": 3, "mode": "sum", "padding_idx": 1, "max_norm": 1.0}),
]

# (module path, constructor arguments) of modules with random initial values: torch's state-dict names and shapes
# are recorded as `state_names/<index>` and `state_shapes/<index>`
STATES: list[tuple[str, dict[str, Any]]] = [
    ("nn.Bilinear", {"in1_features": 3, "in2_features": 2, "out_features": 4}),
    ("nn.Bilinear", {"in1_features": 2, "in2_features": 2, "out_features": 1, "bias": False}),
    ("nn.PReLU", {"num_parameters": 5}),
    ("nn.Embedding", {"num_embeddings": 7, "embedding_dim": 3, "padding_idx": 1}),
    ("nn.InstanceNorm3d", {"num_features": 2, "affine": True, "track_running_stats": True}),
    ("nn.InstanceNorm1d", {"num_features": 2, "affine": True, "bias": False}),
    ("nn.TripletMarginWithDistanceLoss", {}),
    ("nn.ModuleList", {}),
    ("nn.EmbeddingBag", {"num_embeddings": 6, "embedding_dim": 2, "mode": "max"}),
]


@dataclass(frozen=True)
class ErrorCase:
    """A call torch refuses: the recorder stores torch's exception class and message (`error/<i>/class`,
    `error/<i>/message`) and checks `names` occurs in the message; kiln must raise the same class naming it too."""

    call: str
    inputs: tuple[In, ...]
    kwargs: dict[str, Any]
    names: str


ERRORS: list[ErrorCase] = [
    ErrorCase("F.glu", (_x(3, 5),), {"dim": 1}, "is size 5"),
    ErrorCase("F.glu", (_x(3, 4),), {"dim": 2}, "got 2"),
    ErrorCase("F.pixel_shuffle", (_x(1, 5, 2, 2),), {"upscale_factor": 2}, "5 is not divisible by 4"),
    ErrorCase("F.pixel_shuffle", (_x(4, 2),), {"upscale_factor": 2}, "2 dimension(s)"),
    ErrorCase("F.pixel_unshuffle", (_x(1, 1, 3, 4),), {"downscale_factor": 2}, "size(-2)=3 is not divisible by 2"),
    ErrorCase("F.fold", (_x(1, 4, 5),), {"output_size": 3, "kernel_size": 2}, "sliding blocks"),
    ErrorCase("F.fold", (_x(1, 5, 4),), {"output_size": 3, "kernel_size": 2}, "kernel_size"),
    ErrorCase("F.unfold", (_x(1, 1, 2, 4, 4),), {"kernel_size": 2}, "[1, 1, 2, 4, 4]"),
    ErrorCase("F.dropout", (_x(3),), {"p": 1.5}, "1.5"),
    ErrorCase("F.dropout2d", (_x(3),), {"p": -0.5}, "-0.5"),
    ErrorCase("F.dropout1d", (_x(1, 2, 3, 4),), {}, "4D input"),
    ErrorCase("F.dropout2d", (_x(3),), {}, "at least 2 dimensions"),
    ErrorCase("F.instance_norm", (_x(2, 3),), {}, "more than 1 spatial element"),
    ErrorCase("F.mse_loss", (_x(2, 3), _x(2, 3), _x(3)), {"weight": Ref(2)}, "same size"),
    ErrorCase("F.l1_loss", (_x(2, 3), _x(2, 3), _x(2, 1)), {"weight": Ref(2)}, "same size"),
    ErrorCase("F.huber_loss", (_x(2, 3), _x(2, 3), _x(3, 2)), {"weight": Ref(2)}, "same size"),
    ErrorCase("F.cross_entropy", (_x(2, 3), _index(2, high=3)), {"reduction": "avg"}, "avg"),
    ErrorCase("F.soft_margin_loss", (_x(2, 3), _x(2, 3)), {"reduction": "total"}, "total"),
    ErrorCase("F.triplet_margin_loss", (_x(2, 3), _x(3), _x(2, 3)), {}, "same number of dim"),
    ErrorCase("F.gaussian_nll_loss", (_x(2, 3), _x(2, 3)), {"var": -1.0}, "negative"),
    ErrorCase("F.bilinear", (_x(2, 3), _x(3, 4), _x(5, 3, 4)), {}, "batch dimensions do not match"),
    ErrorCase("F.embedding", (_index(3, high=4), _x(4, 2, 1)), {}, "must be 2-D"),
    ErrorCase("F.embedding_bag", (_index(3, high=4), _x(4, 2)), {}, "offsets has to be a 1D Tensor"),
    ErrorCase("F.grid_sample", (_x(1, 1, 3, 3), _x(1, 2, 2, 2)), {"mode": "cubic"}, "'cubic'"),
    ErrorCase("F.grid_sample", (_x(1, 1, 3, 3), _x(1, 2, 2, 2)), {"padding_mode": "wrap"}, "'wrap'"),
    ErrorCase("F.grid_sample", (_x(2, 1, 3, 3), _x(1, 2, 2, 2)), {"align_corners": False}, "same batch size"),
    ErrorCase("F.affine_grid", (_x(1, 3, 3),), {"size": (1, 1, 2, 2), "align_corners": False}, "Nx2x3"),
    ErrorCase("F.affine_grid", (_x(1, 2, 3),), {"size": (1, 1, 2, 2, 2), "align_corners": False}, "Nx3x4"),
    ErrorCase("F.affine_grid", (_x(1, 2, 3),), {"size": (1, 1, 0, 2), "align_corners": False}, "positive output size"),
    ErrorCase("F.embedding_bag", (_index(2, 3, high=4), _x(4, 2)), {"mode": "min"}, "mode has to be one of"),
    ErrorCase(
        "F.embedding_bag",
        (_index(2, 3, high=4), _x(4, 2), _x(2, 3)),
        {"per_sample_weights": Ref(2)},
        "only supported for mode='sum'",
    ),
]


def build_port_model(nn: Any) -> Any:
    """A small PyTorch-style CNN built from `nn` (torch.nn or kiln.tensor.nn: the same code runs on both), using
    containers, InstanceNorm, grouped convs, GELU, channel dropout, adaptive pooling and a Bilinear head."""

    class Net(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.LeakyReLU(0.1)
            )
            self.blocks = nn.ModuleList(
                [nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.GELU(), nn.Dropout2d(0.0)) for _ in range(2)]
            )
            self.heads = nn.ModuleDict({"cls": nn.Linear(8, 5), "aux": nn.Bilinear(8, 8, 2)})
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x: Any) -> tuple[Any, Any]:
            x = self.stem(x)
            for block in self.blocks:
                x = x + block(x)
            features = self.pool(x).flatten(1)
            return self.heads["cls"](features), self.heads["aux"](features, features)

    return Net()


def port_loss(nn: Any, model: Any, x: Any, labels: Any, aux_target: Any) -> Any:
    """The port model's training loss: label-smoothed cross entropy plus the auxiliary head's MSE."""
    logits, aux = model(x)
    return nn.CrossEntropyLoss(label_smoothing=0.1)(logits, labels) + nn.MSELoss()(aux, aux_target)
