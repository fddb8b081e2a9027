"""Network fault injection between named clients and bookies (``cluster.network``).

Faults act on messages, never on answers' meaning: a blocked or dropped
request, or a lost reply, surfaces to the client as a timeout.
"""

from __future__ import annotations

import threading
from collections import defaultdict

REQUEST_KINDS = ("add", "read", "read_lac", "fence", "recovery_read", "recovery_add")


class NetworkFaults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocked: set[tuple[str, str]] = set()
        self._delays: dict[tuple[str, str], float] = {}
        self._drops: defaultdict[tuple[str, str, str], int] = defaultdict(int)

    def block(self, src: str, dst: str) -> None:
        """Lose every request from ``src`` to ``dst`` and every reply back, until unblocked."""
        with self._lock:
            self._blocked.add((src, dst))

    def unblock(self, src: str, dst: str) -> None:
        with self._lock:
            self._blocked.discard((src, dst))

    def delay(self, src: str, dst: str, seconds: float) -> None:
        """Deliver requests from ``src`` to ``dst`` ``seconds`` late (0 removes the delay).

        A delayed request is still delivered after its sender gave up waiting: that
        late arrival is exactly what the model checker's counterexamples need.
        """
        if seconds < 0:
            raise ValueError(f"delay must be >= 0, got {seconds}")
        with self._lock:
            if seconds:
                self._delays[(src, dst)] = seconds
            else:
                self._delays.pop((src, dst), None)

    def drop_next(self, src: str, dst: str, op: str, count: int = 1) -> None:
        """Lose the next ``count`` requests of kind ``op`` from ``src`` to ``dst``."""
        if op not in REQUEST_KINDS:
            raise ValueError(f"unknown request kind {op!r}; one of {', '.join(REQUEST_KINDS)}")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        with self._lock:
            self._drops[(src, dst, op)] += count

    def heal(self) -> None:
        """Remove every fault."""
        with self._lock:
            self._blocked.clear()
            self._delays.clear()
            self._drops.clear()

    # -- queried by transports -----------------------------------------------------------------

    def is_blocked(self, src: str, dst: str) -> bool:
        with self._lock:
            return (src, dst) in self._blocked

    def delay_for(self, src: str, dst: str) -> float:
        with self._lock:
            return self._delays.get((src, dst), 0.0)

    def take_drop(self, src: str, dst: str, kind: str) -> bool:
        """True (and consume one) if the next request of this kind must be lost."""
        with self._lock:
            key = (src, dst, kind)
            if self._drops.get(key, 0) > 0:
                self._drops[key] -= 1
                if not self._drops[key]:
                    del self._drops[key]
                return True
            return False
