"""The recurrent networks RNN, GRU and LSTM (forward / reverse / bidirectional, sequence lengths, both layouts,
peepholes, clip, custom activations), unrolled over the sequence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.tensor import dtypes
from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import all_checks, one_of, operator
from kiln.tensor.tensor import Tensor

__all__: list[str] = []

# activation name -> (function of (x, alpha, beta), how many of activation_alpha / activation_beta it takes)
_ACTIVATIONS: dict[str, tuple[Callable[[Tensor, float, float], Tensor], int]] = {
    "Relu": (lambda x, a, b: x.relu(), 0),
    "Tanh": (lambda x, a, b: x.tanh(), 0),
    "Sigmoid": (lambda x, a, b: x.sigmoid(), 0),
    "Affine": (lambda x, a, b: x * a + b, 2),
    "LeakyRelu": (lambda x, a, b: x.leaky_relu(a), 1),
    "ThresholdedRelu": (lambda x, a, b: (x > a).where(x, 0.0), 1),
    "ScaledTanh": (lambda x, a, b: (x * b).tanh() * a, 2),
    "HardSigmoid": (lambda x, a, b: (x * a + b).clip(0.0, 1.0), 2),
    "Elu": (lambda x, a, b: (x < 0).where((x.exp() - 1) * a, x), 1),
    "Softsign": (lambda x, a, b: x / (x.abs() + 1), 0),
    "Softplus": (lambda x, a, b: x.maximum(0.0) + (-x.abs()).exp().log1p(), 0),
}

_DEFAULT_ALPHA = {
    "LeakyRelu": 0.01,
    "ThresholdedRelu": 1.0,
    "Affine": 1.0,
    "ScaledTanh": 1.0,
    "HardSigmoid": 0.2,
    "Elu": 1.0,
}
_DEFAULT_BETA = {"Affine": 0.0, "ScaledTanh": 1.0, "HardSigmoid": 0.5}

Activation = Callable[[Tensor], Tensor]


def _check_activations(attributes: Attributes, opset: int) -> str | None:
    names = attributes.values.get("activations") or []
    unknown = [name for name in names if name not in _ACTIVATIONS]
    return f"activations {unknown} (supported: {', '.join(_ACTIVATIONS)})" if unknown else None


def _bind(function: Callable[[Tensor, float, float], Tensor], alpha: float, beta: float) -> Activation:
    return lambda x: function(x, alpha, beta)


def _activations(attributes: Attributes, defaults: list[str], directions: int) -> list[list[Activation]]:
    """The activation functions of each direction, with their alpha / beta bound."""
    names = list(attributes.values.get("activations") or defaults * directions)
    alphas = list(attributes.floats("activation_alpha") or [])
    betas = list(attributes.floats("activation_beta") or [])
    bound: list[Activation] = []
    for name in names:
        function, count = _ACTIVATIONS[name]
        alpha = alphas.pop(0) if count >= 1 and alphas else _DEFAULT_ALPHA.get(name, 0.0)
        beta = betas.pop(0) if count >= 2 and betas else _DEFAULT_BETA.get(name, 0.0)
        bound.append(_bind(function, alpha, beta))
    per_direction = len(defaults)
    return [bound[index * per_direction : (index + 1) * per_direction] for index in range(directions)]


@dataclass
class _Weights:
    """One direction's weights: gates stacked along the rows, as ONNX stores them."""

    input_weight: Tensor  # (gates * hidden, input)
    recurrent_weight: Tensor  # (gates * hidden, hidden)
    input_bias: Tensor | None
    recurrent_bias: Tensor | None
    peephole: Tensor | None


def _reverse_sequences(x: Tensor, lengths: Tensor | None) -> Tensor:
    """x (sequence, batch, ...) with each batch entry's first lengths[b] steps reversed."""
    if lengths is None:
        return x.flip(0)
    steps = x.shape[0]
    time = Tensor.arange(steps, dtype=dtypes.int64).reshape(steps, 1)
    length = lengths.reshape(1, -1)
    source = (time < length).where(length - 1 - time, time)
    return x.gather(0, source.reshape(steps, -1, *[1] * (x.ndim - 2)).expand(x.shape))


def _split(x: Tensor, parts: int) -> list[Tensor]:
    size = x.shape[-1] // parts
    return [x[..., index * size : (index + 1) * size] for index in range(parts)]


def _run_direction(
    kind: str,
    x: Tensor,
    weights: _Weights,
    state: tuple[Tensor, Tensor | None],
    activations: list[Activation],
    lengths: Tensor | None,
    clip: float | None,
    linear_before_reset: bool,
    input_forget: bool,
) -> tuple[list[Tensor], Tensor, Tensor | None]:
    hidden, cell = state
    projected = x.matmul(weights.input_weight.T)  # (sequence, batch, gates * hidden)
    if weights.input_bias is not None:
        projected = projected + weights.input_bias
    recurrent_bias = weights.recurrent_bias
    outputs = []

    def clipped(value: Tensor) -> Tensor:
        return value if clip is None else value.clip(-clip, clip)

    for step in range(x.shape[0]):
        inputs = projected[step]
        previous_hidden, previous_cell = hidden, cell
        if kind == "RNN":
            recurrent = hidden.matmul(weights.recurrent_weight.T)
            if recurrent_bias is not None:
                recurrent = recurrent + recurrent_bias
            hidden = activations[0](clipped(inputs + recurrent))
        elif kind == "GRU":
            input_z, input_r, input_h = _split(inputs, 3)
            weight_z, weight_r, weight_h = weights.recurrent_weight.chunk(3, 0)
            bias_z, bias_r, bias_h = recurrent_bias.chunk(3, 0) if recurrent_bias is not None else (0.0, 0.0, 0.0)
            update = activations[0](clipped(input_z + hidden.matmul(weight_z.T) + bias_z))
            reset = activations[0](clipped(input_r + hidden.matmul(weight_r.T) + bias_r))
            if linear_before_reset:
                candidate_input = input_h + reset * (hidden.matmul(weight_h.T) + bias_h)
            else:
                candidate_input = input_h + (reset * hidden).matmul(weight_h.T) + bias_h
            candidate = activations[1](clipped(candidate_input))
            hidden = (1 - update) * candidate + update * hidden
        else:
            assert cell is not None
            gates = inputs + hidden.matmul(weights.recurrent_weight.T)
            if recurrent_bias is not None:
                gates = gates + recurrent_bias
            gate_i, gate_o, gate_f, gate_c = _split(gates, 4)
            peep_i, peep_o, peep_f = weights.peephole.chunk(3, 0) if weights.peephole is not None else (0.0, 0.0, 0.0)
            input_gate = activations[0](clipped(gate_i + peep_i * cell))
            forget_gate = (1 - input_gate) if input_forget else activations[0](clipped(gate_f + peep_f * cell))
            cell = forget_gate * cell + input_gate * activations[1](clipped(gate_c))
            output_gate = activations[0](clipped(gate_o + peep_o * cell))
            hidden = output_gate * activations[2](cell)
        if lengths is not None:
            running = (lengths > step).reshape(-1, 1)
            hidden = running.where(hidden, previous_hidden)
            if cell is not None and previous_cell is not None:
                cell = running.where(cell, previous_cell)
            outputs.append(running.where(hidden, 0.0).cast(hidden.dtype))
        else:
            outputs.append(hidden)
    return outputs, hidden, cell


_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _recurrent(kind: str) -> Callable[[NodeCall], list[Tensor | None]]:
    def handler(call: NodeCall) -> list[Tensor | None]:
        attributes = call.attributes
        x, input_weight, recurrent_weight = call.tensor(0), call.tensor(1), call.tensor(2)
        bias, lengths, initial_hidden = call.optional(3), call.optional(4), call.optional(5)
        initial_cell = call.optional(6) if kind == "LSTM" else None
        peephole = call.optional(7) if kind == "LSTM" else None
        batchwise = attributes.int("layout", 0) == 1
        if batchwise:
            x = x.transpose(0, 1)
            initial_hidden = None if initial_hidden is None else initial_hidden.transpose(0, 1)
            initial_cell = None if initial_cell is None else initial_cell.transpose(0, 1)
        direction = attributes.string("direction", "forward")
        directions = 2 if direction == "bidirectional" else 1
        hidden_size = recurrent_weight.shape[-1]
        batch = x.shape[1]
        activations = _activations(attributes, _DEFAULT_ACTIVATIONS[kind], directions)
        clip = attributes.float("clip", 0.0) if "clip" in attributes else None
        lengths = None if lengths is None else lengths.cast(dtypes.int64)
        outputs, final_hidden, final_cell = [], [], []
        for index in range(directions):
            split_bias = None if bias is None else bias[index].chunk(2, 0)
            weights = _Weights(
                input_weight[index],
                recurrent_weight[index],
                None if split_bias is None else split_bias[0],
                None if split_bias is None else split_bias[1],
                None if peephole is None else peephole[index],
            )
            zeros = Tensor.zeros(batch, hidden_size, dtype=x.dtype)
            state = (
                zeros if initial_hidden is None else initial_hidden[index],
                None if kind != "LSTM" else zeros if initial_cell is None else initial_cell[index],
            )
            reverse = direction == "reverse" or index == 1
            source = _reverse_sequences(x, lengths) if reverse else x
            steps, hidden, cell = _run_direction(
                kind,
                source,
                weights,
                state,
                activations[index],
                lengths,
                clip,
                bool(attributes.int("linear_before_reset", 0)),
                bool(attributes.int("input_forget", 0)),
            )
            sequence = Tensor.stack(*steps, dim=0)
            outputs.append(_reverse_sequences(sequence, lengths) if reverse else sequence)
            final_hidden.append(hidden)
            if cell is not None:
                final_cell.append(cell)
        y = Tensor.stack(*outputs, dim=1)  # (sequence, directions, batch, hidden)
        y_hidden = Tensor.stack(*final_hidden, dim=0)
        y_cell = Tensor.stack(*final_cell, dim=0) if final_cell else None
        if batchwise:
            y = y.permute(2, 0, 1, 3)
            y_hidden = y_hidden.transpose(0, 1)
            y_cell = None if y_cell is None else y_cell.transpose(0, 1)
        return [y, y_hidden, y_cell] if kind == "LSTM" else [y, y_hidden]

    return handler


_COMMON = ["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"]
_CHECK = all_checks(_check_activations, one_of("direction", ["forward", "reverse", "bidirectional"], "forward"))
operator("RNN", attributes=_COMMON, check=_CHECK)(_recurrent("RNN"))
operator("GRU", attributes=[*_COMMON, "linear_before_reset"], check=_CHECK)(_recurrent("GRU"))
operator("LSTM", attributes=[*_COMMON, "input_forget"], check=_CHECK)(_recurrent("LSTM"))
