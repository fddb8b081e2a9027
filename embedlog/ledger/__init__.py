"""The client side of the replication protocol: bounded ledgers."""
