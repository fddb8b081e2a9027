"""The auditor: BP-34 cluster metadata checker and its entry-availability encoding."""

from embedlog.auditor.availability import AvailabilityOfEntries, SequenceGroup

__all__ = ["AvailabilityOfEntries", "SequenceGroup"]
