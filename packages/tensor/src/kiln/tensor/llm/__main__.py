"""`python -m kiln.tensor.llm`: see kiln.tensor.llm.cli."""

import sys

from kiln.tensor.llm.cli import main

sys.exit(main())
