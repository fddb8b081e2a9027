import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import Harness


@pytest.fixture(params=["frames", "handle"])
def harness(request, tmp_path):
    made = []

    def make(**settings):
        h = Harness(tmp_path, via=request.param, **settings)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
