"""Suite-wide settings: no test may reach the internet (LiteLLM must use its bundled cost map)."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The ``backend`` fixture: a test taking it runs on SQLite and on PostgreSQL (tests/pg.py).
from tests.pg import backend  # noqa: F401
