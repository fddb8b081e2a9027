"""Bookies in processes of their own: ``embedlog bookie run`` (one long-running bookie
server) and what ``LocalCluster(processes=True)`` uses to start, stop, kill and pause them."""
