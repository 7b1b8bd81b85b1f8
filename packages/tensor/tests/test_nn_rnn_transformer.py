"""The recurrent and transformer layers beyond their recorded forward and backward (`conformance_nn`): torch's
initialisation distributions, the input checks and their errors, and the shapes of every input layout."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.tensor import Tensor, nn

pytestmark = pytest.mark.default_device("PYTHON")


def test_recurrent_initialisation_is_uniform_in_one_over_sqrt_hidden() -> None:
    Tensor.manual_seed(0)
    bound = 1 / math.sqrt(16)
    for layer in (nn.LSTM(24, 16, num_layers=2, proj_size=8), nn.GRUCell(24, 16)):
        values = np.concatenate([parameter.numpy().ravel() for parameter in layer.parameters()])
        # U(-b, b): every value inside, extremes near the bound, standard deviation b / sqrt(3)
        assert np.abs(values).max() <= bound and np.abs(values).max() > 0.98 * bound
        assert abs(values.std() - bound / math.sqrt(3)) < 0.01 * bound * 10


def test_transformer_redraws_matrices_xavier_uniform() -> None:
    Tensor.manual_seed(1)
    model = nn.Transformer(16, 2, 1, 1, dim_feedforward=32)
    weight = model.encoder.layers[0].linear1.weight.numpy()  # (32, 16)
    bound = math.sqrt(6 / (16 + 32))
    assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.95 * bound
    assert np.all(model.decoder.norm.weight.numpy() == 1.0)  # vectors keep their own initialisation
    first, second = (model.encoder.layers[0].linear1.weight, model.decoder.layers[0].linear1.weight)
    assert not np.array_equal(first.numpy(), second.numpy())


def test_stacks_copy_the_layer_into_independent_tensors() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    stack = nn.TransformerEncoder(layer, 3)
    weights = [block.linear1.weight for block in stack.layers]
    assert len({id(weight) for weight in weights}) == 3
    for weight in weights:
        np.testing.assert_array_equal(weight.numpy(), layer.linear1.weight.numpy())
    weights[0].assign(Tensor.zeros(*weights[0].shape)).realize()
    assert not np.all(weights[1].numpy() == 0.0)
    assert len(stack.parameters()) == 3 * len(layer.parameters())


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: nn.RNNBase("GRU", 3, 4, proj_size=2), "proj_size argument is only supported for LSTM"),
        (lambda: nn.LSTM(3, 4, proj_size=4), "proj_size \\(4\\) has to be smaller than hidden_size \\(4\\)"),
        (lambda: nn.RNN(3, 4, nonlinearity="gelu"), "Unknown nonlinearity 'gelu'"),
        (lambda: nn.RNN(3, 0), "hidden_size must be an int >= 1, got 0"),
        (lambda: nn.LSTM(3, 4, dropout=1.5), "dropout should be a number in range \\[0, 1\\]"),
        (lambda: nn.TransformerEncoderLayer(8, 3), "embed_dim \\(8\\) must be divisible by num_heads \\(3\\)"),
        (lambda: nn.TransformerEncoderLayer(8, 2, activation="swish"), "activation should be relu/gelu, not swish"),
        (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), -1), "num_layers must be an int >= 0"),
    ],
)
def test_constructor_errors(build: object, message: str) -> None:
    with pytest.raises((ValueError, RuntimeError), match=message):
        build()  # type: ignore[operator]


def test_forward_input_errors_name_the_expected_shapes() -> None:
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(RuntimeError, match=r"input_size\. Expected 3, got 5"):
        lstm(Tensor.zeros(2, 1, 5))
    with pytest.raises(RuntimeError, match="Expected h_0 size \\(2, 1, 4\\), got \\(1, 1, 4\\)"):
        lstm(Tensor.zeros(2, 1, 3), (Tensor.zeros(1, 1, 4), Tensor.zeros(2, 1, 4)))
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D"):
        nn.GRU(3, 4)(Tensor.zeros(1, 2, 1, 3))
    with pytest.raises(RuntimeError, match="expected a hidden state of shape \\(2, 4\\)"):
        nn.GRUCell(3, 4)(Tensor.zeros(2, 3), Tensor.zeros(3, 4))
    with pytest.raises(ValueError, match="expects inputs of shape"):
        nn.TransformerEncoderLayer(8, 2, 16)(Tensor.zeros(2, 3, 6))
    with pytest.raises(RuntimeError, match="batch number of src and tgt"):
        nn.Transformer(8, 2, 1, 1, 16)(Tensor.zeros(5, 2, 8), Tensor.zeros(4, 3, 8))


def test_output_shapes_of_every_layout() -> None:
    gru = nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    output, hidden = gru(Tensor.zeros(2, 5, 3))
    assert (output.shape, hidden.shape) == ((2, 5, 8), (4, 2, 4))
    output, hidden = gru(Tensor.zeros(5, 3))  # unbatched: (L, H_in), batch_first does not apply
    assert (output.shape, hidden.shape) == ((5, 8), (4, 4))
    lstm = nn.LSTM(3, 6, proj_size=2)
    output, (hidden, cell) = lstm(Tensor.zeros(4, 1, 3))
    assert (output.shape, hidden.shape, cell.shape) == ((4, 1, 2), (1, 1, 2), (1, 1, 6))
    hidden, cell = nn.LSTMCell(3, 4)(Tensor.zeros(3))
    assert (hidden.shape, cell.shape) == ((4,), (4,))
    layer = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True, norm_first=True)
    assert layer(Tensor.zeros(2, 4, 8), Tensor.zeros(2, 5, 8)).shape == (2, 4, 8)
    assert layer(Tensor.zeros(4, 8), Tensor.zeros(5, 8)).shape == (4, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(3).numpy()
    np.testing.assert_array_equal(mask, np.triu(np.full((3, 3), -np.inf, np.float32), 1))


def test_is_causal_without_a_mask_means_the_causal_mask() -> None:
    Tensor.manual_seed(2)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    x = Tensor(np.random.default_rng(3).standard_normal((5, 1, 8)).astype(np.float32))
    causal = layer(x, is_causal=True).numpy()
    masked = layer(x, src_mask=nn.Transformer.generate_square_subsequent_mask(5)).numpy()
    np.testing.assert_allclose(causal, masked, rtol=1e-5, atol=1e-6)
    # the first position sees only itself: changing later positions leaves it unchanged
    changed = x.numpy().copy()
    changed[1:] += 1.0
    np.testing.assert_allclose(layer(Tensor(changed), is_causal=True).numpy()[0], causal[0], rtol=1e-5, atol=1e-6)


def test_all_weights_lists_parameters_in_torchs_order() -> None:
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2)
    lstm.flatten_parameters()  # a no-op kept for torch code
    weights = lstm.all_weights
    assert len(weights) == 4 and all(len(group) == 5 for group in weights)
    assert weights[1][0] is lstm.weight_ih_l0_reverse and weights[2][4] is lstm.weight_hr_l1
    assert [id(tensor) for group in weights for tensor in group] == [id(tensor) for tensor in lstm.parameters()]
    assert [len(group) for group in nn.GRU(3, 4, bias=False).all_weights] == [2]
