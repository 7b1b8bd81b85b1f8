"""Conformance of the torch.nn / nn.functional names of issue 38's last gap (BatchNorm3d, ConvTranspose3d, the Lazy*
modules, the in-place activations and pdist) against torch answers recorded by `record_nn_extra.py` into
`nn_extra.npz` (the tests load the .npz only; torch is never imported)."""
