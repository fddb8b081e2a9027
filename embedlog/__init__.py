"""embedlog: an embeddable replicated log (Apache BookKeeper's replication protocol)."""
