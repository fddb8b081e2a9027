"""embedlog auditor."""
