"""embedlog transport."""
