"""Recurrent layers with torch.nn's names, arguments, parameter names and initialisation: `RNN`, `LSTM`, `GRU` (stacked,
bidirectional, with dropout between layers and, for LSTM, a projection `proj_size`) and the one-step `RNNCell`,
`LSTMCell`, `GRUCell`.

Parameters are attributes named like torch's (`weight_ih_l0`, `weight_hh_l1_reverse`, `bias_ih_l0`,
`weight_hr_l0`), created in torch's order, so `state_dict()` lists the same keys as torch's and a torch checkpoint
loads as is. Every parameter starts as U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch's `reset_parameters`.

Gates follow torch's layout of the stacked weight rows: LSTM (input, forget, cell, output), GRU (reset, update, new),
where the GRU's new gate is tanh(W_in x + b_in + r * (W_hn h + b_hn)).

A sequence is unrolled step by step into one lazy graph: the input projection of every step is one matrix product
per layer and direction, and only the hidden-to-hidden product runs per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kiln.tensor.nn import functional as F
from kiln.tensor.nn import init
from kiln.tensor.nn.linear import check_size
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _nonlinearity_mode(nonlinearity: str) -> str:
    if nonlinearity == "tanh":
        return "RNN_TANH"
    if nonlinearity == "relu":
        return "RNN_RELU"
    raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")


# one step of each cell kind: (input projection x W_ih^T + b_ih, hidden h, weight_hh, bias_hh) -> new hidden;
# LSTM's state is (h, c)
def _rnn_step(activation: Callable[[Tensor], Tensor]) -> Callable[..., Tensor]:
    def step(projected: Tensor, hidden: Tensor, weight_hh: Tensor, bias_hh: Tensor | None) -> Tensor:
        return activation(projected + hidden.linear(weight_hh, bias_hh))

    return step


def _gru_step(projected: Tensor, hidden: Tensor, weight_hh: Tensor, bias_hh: Tensor | None) -> Tensor:
    input_reset, input_update, input_new = projected.chunk(3, -1)
    hidden_reset, hidden_update, hidden_new = hidden.linear(weight_hh, bias_hh).chunk(3, -1)
    reset = (input_reset + hidden_reset).sigmoid()
    update = (input_update + hidden_update).sigmoid()
    new = (input_new + reset * hidden_new).tanh()
    return (1.0 - update) * new + update * hidden


def _lstm_step(
    projected: Tensor, state: tuple[Tensor, Tensor], weight_hh: Tensor, bias_hh: Tensor | None,
    weight_hr: Tensor | None = None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    hidden, cell = state
    gates = projected + hidden.linear(weight_hh, bias_hh)
    input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, -1)
    cell = forget_gate.sigmoid() * cell + input_gate.sigmoid() * cell_gate.tanh()
    hidden = output_gate.sigmoid() * cell.tanh()
    if weight_hr is not None:
        hidden = hidden.linear(weight_hr)
    return hidden, cell


class RNNBase(Module):
    """The shared part of `RNN`, `LSTM` and `GRU`: parameters, shape checks and the stacked bidirectional unroll."""

    def __init__(
        self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
        batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
        device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode!r}, expected one of {sorted(_GATES)}")
        self.mode = mode
        self.input_size = check_size(input_size, f"{type(self).__name__} input_size", 0)
        self.hidden_size = check_size(hidden_size, f"{type(self).__name__} hidden_size")
        self.num_layers = check_size(num_layers, f"{type(self).__name__} num_layers")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an element being "
                f"zeroed, got {dropout!r}"
            )
        self.proj_size = check_size(proj_size, f"{type(self).__name__} proj_size", 0)
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size and proj_size >= hidden_size:
            raise ValueError(f"proj_size ({proj_size}) has to be smaller than hidden_size ({hidden_size})")
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        output_size = proj_size or hidden_size
        bound = 1.0 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else output_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes: list[tuple[str, tuple[int, ...]]] = [
                    ("weight_ih", (gate_size, layer_input)),
                    ("weight_hh", (gate_size, output_size)),
                ]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    setattr(self, name + suffix, init.uniform(shape, -bound, bound, device=device))

    def flatten_parameters(self) -> None:
        """Does nothing: torch packs the weights into one cuDNN buffer here; kiln keeps them as they are."""

    @property
    def all_weights(self) -> list[list[Tensor]]:
        """The parameters of each layer and direction in torch's order: [weight_ih, weight_hh, bias_ih, bias_hh,
        (weight_hr)] for layer 0, layer 0 reverse, layer 1, ..."""
        directions = 2 if self.bidirectional else 1
        names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"]
        result = []
        for layer in range(self.num_layers):
            for direction in range(directions):
                found = [self._parameter(name, layer, direction) for name in names]
                result.append([weight for weight in found if weight is not None])
        return result

    def _parameter(self, name: str, layer: int, direction: int) -> Tensor | None:
        value: Tensor | None = getattr(self, f"{name}_l{layer}" + ("_reverse" if direction else ""), None)
        return value

    @property
    def _output_size(self) -> int:
        return self.proj_size or self.hidden_size

    def _check_input(self, x: Tensor) -> bool:
        """Whether `x` is batched; ValueError / RuntimeError for a wrong rank or feature size."""
        if not isinstance(x, Tensor):
            raise TypeError(f"{type(self).__name__} expects a Tensor input, got {type(x).__name__}")
        if x.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {x.ndim}D tensor instead")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got {x.shape[-1]}"
            )
        return x.ndim == 3

    def _initial(self, given: Tensor | None, batch: int, size: int, like: Tensor, what: str) -> Tensor:
        directions = 2 if self.bidirectional else 1
        expected = (self.num_layers * directions, batch, size)
        if given is None:
            return Tensor.zeros(*expected, dtype=like.dtype, device=like.device)
        if not isinstance(given, Tensor):
            raise TypeError(f"{type(self).__name__} {what} must be a Tensor, got {type(given).__name__}")
        if given.shape != expected:
            raise RuntimeError(f"Expected {what} size {expected}, got {given.shape}")
        return given

    def _unroll(self, x: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """Runs the stack over x (L, N, H_in) from initial states [h0] or [h0, c0] (layers * directions, N, *);
        returns (output (L, N, D * H_out), final states of the same shapes as the initial ones)."""
        directions = 2 if self.bidirectional else 1
        length = x.shape[0]
        finals: list[list[Tensor]] = [[] for _ in states]
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                projected = layer_input.linear(
                    self._weight("weight_ih", layer, direction), self._parameter("bias_ih", layer, direction)
                )
                state = [initial[index] for initial in states]
                steps: list[Tensor] = [Tensor.empty(0)] * length
                order = range(length - 1, -1, -1) if direction else range(length)
                for time in order:
                    state = self._step(projected[time], state, layer, direction)
                    steps[time] = state[0]
                outputs.append(Tensor.stack(*steps) if length else Tensor.zeros(0, *state[0].shape))
                for final, value in zip(finals, state):
                    final.append(value)
            layer_input = outputs[0] if directions == 1 else outputs[0].cat(outputs[1], dim=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        return layer_input, [Tensor.stack(*final) for final in finals]

    def _weight(self, name: str, layer: int, direction: int) -> Tensor:
        weight = self._parameter(name, layer, direction)
        if weight is None:
            raise RuntimeError(f"{type(self).__name__} has no parameter {name}_l{layer}")
        return weight

    def _step(self, projected: Tensor, state: list[Tensor], layer: int, direction: int) -> list[Tensor]:
        weight_hh = self._weight("weight_hh", layer, direction)
        bias_hh = self._parameter("bias_hh", layer, direction)
        if self.mode == "LSTM":
            weight_hr = self._parameter("weight_hr", layer, direction)
            return list(_lstm_step(projected, (state[0], state[1]), weight_hh, bias_hh, weight_hr))
        if self.mode == "GRU":
            return [_gru_step(projected, state[0], weight_hh, bias_hh)]
        activation = Tensor.tanh if self.mode == "RNN_TANH" else Tensor.relu
        return [_rnn_step(activation)(projected, state[0], weight_hh, bias_hh)]

    def _run(self, x: Tensor, initial: list[Tensor | None]) -> tuple[Tensor, list[Tensor]]:
        """Shape handling shared by the three kinds: unbatched and batch_first inputs, default zero states."""
        batched = self._check_input(x)
        if not batched:
            x = x.unsqueeze(1)
            for index, state in enumerate(initial):
                if state is not None:
                    if state.ndim != 2:
                        raise RuntimeError(
                            f"For unbatched 2-D input, hx should also be 2-D but got {state.ndim}-D tensor"
                        )
                    initial[index] = state.unsqueeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        sizes = [self._output_size, self.hidden_size]
        names = ["h_0", "c_0"]
        states = [self._initial(state, x.shape[1], sizes[i], x, names[i]) for i, state in enumerate(initial)]
        output, finals = self._unroll(x, states)
        if not batched:
            return output.squeeze(1), [final.squeeze(1) for final in finals]
        if self.batch_first:
            output = output.transpose(0, 1)
        return output, finals

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            text += f", proj_size={self.proj_size}"
        defaults: list[tuple[str, Any, Any]] = [
            ("num_layers", self.num_layers, 1),
            ("bias", self.bias, True),
            ("batch_first", self.batch_first, False),
            ("dropout", self.dropout, 0.0),
            ("bidirectional", self.bidirectional, False),
        ]
        for name, value, default in defaults:
            if value != default:
                text += f", {name}={value}"
        return text


class RNN(RNNBase):
    """An Elman RNN, h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu), like `torch.nn.RNN`.

    Input (L, N, H_in) (batch_first: (N, L, H_in); unbatched (L, H_in)) and optional h_0 (D * num_layers, N, H);
    returns (output (L, N, D * H), h_n (D * num_layers, N, H)) with D = 2 when bidirectional.

    Example:
        >>> output, h_n = RNN(3, 4, num_layers=2)(Tensor.randn(5, 2, 3)); output.shape, h_n.shape
        ((5, 2, 4), (2, 2, 4))
    """

    def __init__(
        self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh", bias: bool = True,
        batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device: str | None = None,
    ) -> None:  # fmt: skip
        self.nonlinearity = nonlinearity
        mode = _nonlinearity_mode(nonlinearity)
        super().__init__(
            mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, device=device
        )

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(output, h_n); see the class docstring for shapes."""
        output, (hidden,) = self._run(input, [hx])
        return output, hidden


class _GatedRNN(RNNBase):
    """`LSTM` and `GRU`: torch's RNNBase arguments after the mode, which the class names."""

    mode = ""

    def __init__(
        self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True, batch_first: bool = False,
        dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0, device: str | None = None,
    ) -> None:  # fmt: skip
        arguments = (input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size)
        super().__init__(self.mode, *arguments, device)


class LSTM(_GatedRNN):
    """A long short-term memory stack, like `torch.nn.LSTM` (gates input, forget, cell, output; with proj_size > 0 the
    hidden state is projected by weight_hr to proj_size).

    Input as `RNN`, optional (h_0, c_0); returns (output (L, N, D * H_out), (h_n, c_n)) with H_out = proj_size or
    hidden_size, c_n (D * num_layers, N, hidden_size).

    Example:
        >>> output, (h_n, c_n) = LSTM(3, 4, batch_first=True)(Tensor.randn(2, 5, 3)); output.shape, c_n.shape
        ((2, 5, 4), (1, 2, 4))
    """

    mode = "LSTM"

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """(output, (h_n, c_n)); see the class docstring for shapes."""
        if hx is not None and (not isinstance(hx, tuple) or len(hx) != 2):
            raise TypeError(f"LSTM hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        output, (hidden, cell) = self._run(input, [None, None] if hx is None else [hx[0], hx[1]])
        return output, (hidden, cell)


class GRU(_GatedRNN):
    """A gated recurrent unit stack, like `torch.nn.GRU` (gates reset, update, new).

    Input and h_0 as `RNN`; returns (output, h_n). Its arguments are LSTM's, as in torch (a proj_size is refused).

    Example:
        >>> output, h_n = GRU(3, 4, bidirectional=True)(Tensor.randn(5, 2, 3)); output.shape, h_n.shape
        ((5, 2, 8), (2, 2, 4))
    """

    mode = "GRU"

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(output, h_n); see the class docstring for shapes."""
        output, (hidden,) = self._run(input, [hx])
        return output, hidden


class RNNCellBase(Module):
    """The shared part of the cells: weight_ih (G * H, H_in), weight_hh (G * H, H), bias_ih, bias_hh."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, gates: int, device: str | None = None) -> None:
        super().__init__()
        self.input_size = check_size(input_size, f"{type(self).__name__} input_size", 0)
        self.hidden_size = check_size(hidden_size, f"{type(self).__name__} hidden_size")
        self.bias = bool(bias)
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = init.uniform((gates * hidden_size, input_size), -bound, bound, device=device)
        self.weight_hh = init.uniform((gates * hidden_size, hidden_size), -bound, bound, device=device)
        self.bias_ih = init.uniform((gates * hidden_size,), -bound, bound, device=device) if bias else None
        self.bias_hh = init.uniform((gates * hidden_size,), -bound, bound, device=device) if bias else None

    def _prepare(self, x: Tensor, states: list[Tensor | None]) -> tuple[Tensor, list[Tensor], bool]:
        """(x as (N, H_in), states as (N, H) with zeros for None, whether x was batched)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"{type(self).__name__} expects a Tensor input, got {type(x).__name__}")
        if x.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {x.ndim}D instead")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[-1]} expected {self.input_size}")
        batched = x.ndim == 2
        if not batched:
            x = x.unsqueeze(0)
        prepared = []
        for state in states:
            if state is None:
                prepared.append(Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device))
                continue
            expected = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
            if not isinstance(state, Tensor) or state.shape != expected:
                raise RuntimeError(
                    f"{type(self).__name__}: expected a hidden state of shape {expected}, got "
                    f"{getattr(state, 'shape', type(state).__name__)}"
                )
            prepared.append(state if batched else state.unsqueeze(0))
        return x, prepared, batched

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            text += ", bias=False"
        return text


class RNNCell(RNNCellBase):
    """One step of an Elman RNN, like `torch.nn.RNNCell`: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu).

    Example:
        >>> RNNCell(3, 4)(Tensor.randn(2, 3)).shape
        (2, 4)
    """

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
        device: str | None = None,
    ) -> None:  # fmt: skip
        _nonlinearity_mode(nonlinearity)
        super().__init__(input_size, hidden_size, bias, 1, device)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        """The next hidden state (N, H) (or (H,) for an unbatched input)."""
        x, (hidden,), batched = self._prepare(input, [hx])
        activation = Tensor.tanh if self.nonlinearity == "tanh" else Tensor.relu
        result = _rnn_step(activation)(x.linear(self.weight_ih, self.bias_ih), hidden, self.weight_hh, self.bias_hh)
        return result if batched else result.squeeze(0)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        return text if self.nonlinearity == "tanh" else f"{text}, nonlinearity={self.nonlinearity}"


class LSTMCell(RNNCellBase):
    """One LSTM step, like `torch.nn.LSTMCell`: returns (h', c').

    Example:
        >>> h, c = LSTMCell(3, 4)(Tensor.randn(2, 3)); h.shape, c.shape
        ((2, 4), (2, 4))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device)

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """(h', c'), each (N, H) (or (H,) for an unbatched input)."""
        if hx is not None and (not isinstance(hx, tuple) or len(hx) != 2):
            raise TypeError(f"LSTMCell hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        x, (hidden, cell), batched = self._prepare(input, [None, None] if hx is None else [hx[0], hx[1]])
        projected = x.linear(self.weight_ih, self.bias_ih)
        hidden, cell = _lstm_step(projected, (hidden, cell), self.weight_hh, self.bias_hh)
        return (hidden, cell) if batched else (hidden.squeeze(0), cell.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step, like `torch.nn.GRUCell`.

    Example:
        >>> GRUCell(3, 4)(Tensor.randn(3)).shape
        (4,)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        """The next hidden state (N, H) (or (H,) for an unbatched input)."""
        x, (hidden,), batched = self._prepare(input, [hx])
        result = _gru_step(x.linear(self.weight_ih, self.bias_ih), hidden, self.weight_hh, self.bias_hh)
        return result if batched else result.squeeze(0)
