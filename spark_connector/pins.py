"""The pin: a stream cursor that holds retention while a commit into the stream is open.

Retention never trims a stream above a committed cursor + 1 (unless the stream was
created with ``retention_overrides_cursors=True``). A commit into a stream commits the
cursor ``spark-sink.<sink>`` at the entry before the first row it appends, stores its
sink record, commits the cursor again, and deletes it once the record says done. So
while a commit is unfinished (its driver died, say) the rows it appended stay in the
stream, and the next commit can count them (exactly_once.count_landed) however much
retention has trimmed above it meanwhile.

Any commit into the stream removes the pins of sinks whose record is done or gone (a
driver that died between pinning and storing its record, or between marking its record
done and deleting its pin). The records are read again after that delete, and a record
that became unfinished meanwhile gets its pin back. Why no record is left unpinned by a
commit that goes on: its first pin makes a driver that dies before the record leave
only a pin; and a delete of that pin by another commit's cleanup either comes before the
cleanup's second read of the records, which then sees the record (and puts the pin
back) or comes before the record was stored, and so before the commit's second pin.
What stays open: a driver that dies between storing its record and its second pin,
when another commit's cleanup deleted its first pin and read the records again just
before the record was stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from spark_connector.exactly_once import SinkRecord

if TYPE_CHECKING:
    from embedlog.unbounded.ledger import UnboundedLedger

PREFIX = "spark-sink."


def pin_name(sink: str) -> str:
    return PREFIX + sink


def pin(ul: UnboundedLedger, sink: str, first: int) -> None:
    """Keep entries from ``first`` on until ``unpin``."""
    # force: a pin of this sink left by a commit that died may stand elsewhere.
    ul.commit(pin_name(sink), first - 1, force=True)


def unpin(ul: UnboundedLedger, sink: str) -> None:
    ul.delete_cursor(pin_name(sink))


def pins(cursors: Mapping[str, int]) -> dict[str, int]:
    """sink -> pinned position, from a stream's cursors."""
    return {c[len(PREFIX) :]: at for c, at in cursors.items() if c.startswith(PREFIX)}


def stale(pinned: Mapping[str, int], records: Mapping[str, SinkRecord]) -> list[str]:
    """The sinks whose pin holds nothing: their record is done, or there is none."""
    return sorted(s for s in pinned if s not in records or records[s].done)


def drop_stale(ul: UnboundedLedger, read: Callable[[], Mapping[str, SinkRecord]]) -> list[str]:
    """Delete the stale pins (``read``: the stream's sink records as they are now);
    returns the sinks whose pin was deleted and stayed deleted."""
    dropped = stale(pins(ul.cursors()), read())
    if not dropped:
        return []
    for sink in dropped:
        unpin(ul, sink)
    now = read()
    back = [s for s in dropped if s in now and not now[s].done]
    for sink in back:
        pin(ul, sink, now[sink].first)
    return [s for s in dropped if s not in back]
