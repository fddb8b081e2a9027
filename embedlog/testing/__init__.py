"""Testing tools: the deterministic simulator (``embedlog.testing.sim``, ``embedlog chaos``)."""
