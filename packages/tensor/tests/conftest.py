"""The tensor tests run in checked mode: index tensors and integer divisors are read and bounds-checked (CHECK=1,
see kiln.tensor.ops.data_checks); a test of the unchecked default sets `Context(CHECK=False)` itself."""

import os

os.environ.setdefault("CHECK", "1")
