"""How many examples a property test runs: its full count in `make test`, a small one in `make test-fast`.

`make test-fast` sets SQUALL_TEST_TIER=fast. Hypothesis then loads the "fast" profile
(registered in tests/conftest.py) for tests that leave the count to it, and a test that
names its own count asks `examples(n)` for it.
"""

from __future__ import annotations

import os

FAST = os.environ.get("SQUALL_TEST_TIER") == "fast"
FAST_EXAMPLES = 200


def examples(full: int) -> int:
    return min(full, FAST_EXAMPLES) if FAST else full
