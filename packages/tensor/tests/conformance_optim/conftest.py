"""Optimizer and LR-scheduler conformance against recorded torch.optim trajectories (`optim_torch.npz`, written by
`record_optim.py` with torch; the tests load the .npz only). The case table `optim_cases.py` is shared by both sides
and imports neither torch nor kiln (imported as `conformance_optim.optim_cases`: the tests folder is on pytest's
pythonpath)."""
