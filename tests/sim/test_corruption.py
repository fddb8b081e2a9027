"""Bits flipped on the wire (the ``*-corrupt`` scenarios, simnet.py): the entries'
digests catch them on every read path, and each path whose check a test-only mutant
skips (digest_mutants.py) lets a corrupted entry through to an invariant, at the seed
pinned here."""

from __future__ import annotations

import pytest
from digest_mutants import MUTANTS
from seed_search import first_caught

from embedlog.testing.sim import run_seed

# Each mutant: the scenario, the first violating seed (from 0) and the invariant that
# sees the corrupted entry. A change to the simulator or the protocol code may move the
# seed: the test then searches from 0 up to SEARCH and says where to pin it.
CAUGHT = {
    # a reader returns the corrupted payload at an acknowledged id
    "reads-skip-digest": ("bounded-corrupt", 10, "AllAckedEntriesAreReadable"),
    # a recovery writes the corrupted payload back
    "recovery-skips-digest": ("bounded-corrupt", 5, "NoOutOfOrderEntries"),
}
SEARCH = 200


@pytest.mark.parametrize("mutant", sorted(CAUGHT))
def test_a_read_path_without_its_digest_check_is_caught(mutant):
    scenario, pinned, invariant = CAUGHT[mutant]
    caught, violated = first_caught(MUTANTS[mutant], scenario, pinned, SEARCH)
    if caught == pinned:
        assert invariant in violated
    # The same history with every check in place holds every invariant, and it did
    # corrupt answers: the digests caught them.
    clean = run_seed(caught, scenario, keep_trace=False)
    assert clean.ok, [str(v) for v in clean.violations]
    assert clean.counts["fault.wire_corrupt"] > 0
