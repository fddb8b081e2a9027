"""embedlog unbounded."""
