import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import Harness


@pytest.fixture
def harness(tmp_path):
    made = []

    def make(**settings):
        h = Harness(tmp_path, **settings)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
