"""The table of recurrent and transformer module cases, shared by the torch recorder and the kiln replay.

A case builds `torch.nn.<cls>(**kwargs)` (or kiln's `nn.<cls>`), with dropout 0 so both sides compute the same
function, loads the recorded state dict into it, and calls it on the recorded inputs. `record_torch_modules.py`
(run with torch) draws the inputs, runs forward and backward (gradients of sum(output_i * upstream_i) over every
output) and saves inputs, state dict, outputs and the gradients of the inputs and of every parameter in
`modules.npz`; `test_nn_module_conformance.py` replays each case on kiln. This module imports neither torch nor kiln.

Inputs are (name, shape, kind): kind 'normal' (standard normal), 'causal' (a float (L, L) mask, -inf above the
diagonal), 'causal_bool' (True above the diagonal: not allowed), 'padding' (a bool (N, S) key padding mask, True at
the last position of batch row 0 and the last two of row 1). Inputs named h0 / c0 are the initial states; an LSTM
gets them as the tuple (h0, c0). Keyword inputs (masks) are passed by name, the others positionally in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CASES", "POSITIONAL", "Case", "call_arguments"]

# inputs passed positionally (in this order); every other input is a keyword argument
POSITIONAL = ("x", "memory", "tgt", "h0", "c0")


def call_arguments(inputs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """(positional, keywords) of the module call on `inputs` (torch or kiln tensors by name): the POSITIONAL ones in
    order, h0 last and paired with c0 as (h0, c0) when there is one, every other input by keyword."""
    positional: list[Any] = [inputs[name] for name in POSITIONAL if name in inputs and name not in ("h0", "c0")]
    if "c0" in inputs:
        positional.append((inputs["h0"], inputs["c0"]))
    elif "h0" in inputs:
        positional.append(inputs["h0"])
    keywords = {name: value for name, value in inputs.items() if name not in POSITIONAL}
    return positional, keywords


@dataclass(frozen=True)
class Case:
    """One module case: `cls(**kwargs)` called on `inputs`; `layers` > 0 wraps `cls` into TransformerEncoder /
    TransformerDecoder (`stack`) of that many copies with a final LayerNorm."""

    name: str
    cls: str
    kwargs: dict[str, Any]
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    stack: str = ""
    layers: int = 0
    eval: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _recurrent_cases() -> list[Case]:
    cases = []
    for kind in ("RNN", "LSTM", "GRU"):
        for bidirectional in (False, True):
            for batch_first in (False, True):
                direction = "bi" if bidirectional else "uni"
                layout = "bf" if batch_first else "sf"
                directions = 2 if bidirectional else 1
                kwargs = {
                    "input_size": 3,
                    "hidden_size": 4,
                    "num_layers": 2,
                    "bidirectional": bidirectional,
                    "batch_first": batch_first,
                }
                x_shape = (2, 5, 3) if batch_first else (5, 2, 3)
                inputs: list[tuple[str, tuple[int, ...], str]] = [("x", x_shape, "normal")]
                inputs.append(("h0", (2 * directions, 2, 4), "normal"))
                if kind == "LSTM":
                    inputs.append(("c0", (2 * directions, 2, 4), "normal"))
                cases.append(Case(f"{kind.lower()}_{direction}_{layout}_h0", kind, kwargs, tuple(inputs)))
                # without initial states (zeros)
                cases.append(Case(f"{kind.lower()}_{direction}_{layout}", kind, kwargs, tuple(inputs[:1])))
    cases += [
        Case("rnn_relu_nobias", "RNN", {"input_size": 3, "hidden_size": 4, "nonlinearity": "relu", "bias": False},
             (("x", (4, 2, 3), "normal"),)),
        Case("lstm_proj_bi", "LSTM",
             {"input_size": 3, "hidden_size": 5, "num_layers": 2, "proj_size": 2, "bidirectional": True},
             (("x", (4, 2, 3), "normal"), ("h0", (4, 2, 2), "normal"), ("c0", (4, 2, 5), "normal"))),
        Case("gru_unbatched", "GRU", {"input_size": 3, "hidden_size": 4, "num_layers": 2},
             (("x", (5, 3), "normal"), ("h0", (2, 4), "normal"))),
        Case("rnncell", "RNNCell", {"input_size": 3, "hidden_size": 4},
             (("x", (2, 3), "normal"), ("h0", (2, 4), "normal"))),
        Case("rnncell_relu_unbatched", "RNNCell", {"input_size": 3, "hidden_size": 4, "nonlinearity": "relu"},
             (("x", (3,), "normal"),)),
        Case("lstmcell", "LSTMCell", {"input_size": 3, "hidden_size": 4},
             (("x", (2, 3), "normal"), ("h0", (2, 4), "normal"), ("c0", (2, 4), "normal"))),
        Case("lstmcell_nobias", "LSTMCell", {"input_size": 3, "hidden_size": 4, "bias": False},
             (("x", (2, 3), "normal"),)),
        Case("grucell", "GRUCell", {"input_size": 3, "hidden_size": 4},
             (("x", (2, 3), "normal"), ("h0", (2, 4), "normal"))),
    ]  # fmt: skip
    return cases


def _transformer_cases() -> list[Case]:
    cases = []
    base = {"d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.0}
    for norm_first in (False, True):
        tag = "prenorm" if norm_first else "postnorm"
        encoder = {**base, "norm_first": norm_first}
        cases += [
            Case(f"encoder_layer_{tag}", "TransformerEncoderLayer", encoder, (("x", (5, 2, 8), "normal"),)),
            Case(f"encoder_layer_{tag}_masks", "TransformerEncoderLayer", {**encoder, "batch_first": True},
                 (("x", (2, 5, 8), "normal"), ("src_mask", (5, 5), "causal"),
                  ("src_key_padding_mask", (2, 5), "padding"))),
            Case(f"encoder_layer_{tag}_gelu_bool_mask", "TransformerEncoderLayer", {**encoder, "activation": "gelu"},
                 (("x", (5, 2, 8), "normal"), ("src_mask", (5, 5), "causal_bool"))),
            Case(f"decoder_layer_{tag}", "TransformerDecoderLayer", {**encoder, "batch_first": True},
                 (("x", (2, 4, 8), "normal"), ("memory", (2, 5, 8), "normal"), ("tgt_mask", (4, 4), "causal"),
                  ("memory_key_padding_mask", (2, 5), "padding"))),
            Case(f"encoder_stack_{tag}", "TransformerEncoderLayer", encoder,
                 (("x", (5, 2, 8), "normal"), ("mask", (5, 5), "causal"), ("src_key_padding_mask", (2, 5), "padding")),
                 stack="TransformerEncoder", layers=2),
            Case(f"decoder_stack_{tag}", "TransformerDecoderLayer", encoder,
                 (("x", (4, 2, 8), "normal"), ("memory", (5, 2, 8), "normal"), ("tgt_mask", (4, 4), "causal")),
                 stack="TransformerDecoder", layers=2),
            Case(f"transformer_{tag}", "Transformer",
                 {**encoder, "num_encoder_layers": 2, "num_decoder_layers": 1, "batch_first": True},
                 (("x", (2, 5, 8), "normal"), ("tgt", (2, 4, 8), "normal"), ("tgt_mask", (4, 4), "causal"),
                  ("src_key_padding_mask", (2, 5), "padding"), ("memory_key_padding_mask", (2, 5), "padding"))),
        ]  # fmt: skip
    cases.append(
        Case("encoder_layer_eval", "TransformerEncoderLayer", {**base, "dropout": 0.5}, (("x", (5, 2, 8), "normal"),),
             eval=True)
    )  # fmt: skip
    return cases


CASES: list[Case] = _recurrent_cases() + _transformer_cases()
