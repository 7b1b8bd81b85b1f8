"""Five models ported from PyTorch (`models.py`) replayed against torch's recorded training steps (`ports.npz`,
written by `record_ports.py` with torch; the tests load the .npz only)."""
