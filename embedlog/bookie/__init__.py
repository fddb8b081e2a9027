"""embedlog bookie."""
