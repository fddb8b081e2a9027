"""Ensemble placement policies: which bookies hold a new ledger or replace a failed one."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Protocol

from embedlog.errors import NotEnoughBookiesError
from embedlog.metadata.striping import write_set_bookies

BookieInfo = Mapping[str, object]


class PlacementPolicy(Protocol):
    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        available: Mapping[str, BookieInfo],
        exclude: set[str],
    ) -> list[str]: ...

    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        available: Mapping[str, BookieInfo],
        exclude: set[str],
    ) -> str: ...

    def violations(
        self, ensemble: Sequence[str], write_quorum: int, infos: Mapping[str, BookieInfo]
    ) -> list[str]:
        """Why ``ensemble`` breaks this policy (BP-34 placement check); [] if it does not."""
        ...


def _candidates(available: Mapping[str, BookieInfo], exclude: set[str]) -> list[str]:
    return sorted(b for b in available if b not in exclude)


class RandomPlacement:
    """Any distinct writable bookies, chosen at random (BookKeeper's default)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        available: Mapping[str, BookieInfo],
        exclude: set[str],
    ) -> list[str]:
        pool = _candidates(available, exclude)
        if len(pool) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, {len(pool)} available: {pool}"
            )
        return self._rng.sample(pool, ensemble_size)

    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        available: Mapping[str, BookieInfo],
        exclude: set[str],
    ) -> str:
        pool = _candidates(available, exclude | set(ensemble))
        if not pool:
            raise NotEnoughBookiesError(
                f"no writable bookie outside {list(ensemble)} to replace {ensemble[index]}"
            )
        return self._rng.choice(pool)

    def violations(
        self, ensemble: Sequence[str], write_quorum: int, infos: Mapping[str, BookieInfo]
    ) -> list[str]:
        if len(set(ensemble)) != len(ensemble):
            return [f"ensemble {list(ensemble)} repeats a bookie"]
        return []


def rack_of(info: BookieInfo | None) -> str:
    return str((info or {}).get("rack", "/default-rack"))


class RackAwarePlacement(RandomPlacement):
    """Spread every write set over as many racks as there are (each bookie reports a ``rack``)."""

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        available: Mapping[str, BookieInfo],
        exclude: set[str],
    ) -> list[str]:
        pool = _candidates(available, exclude)
        if len(pool) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, {len(pool)} available: {pool}"
            )
        by_rack: dict[str, list[str]] = {}
        for b in pool:
            by_rack.setdefault(rack_of(available[b]), []).append(b)
        for members in by_rack.values():
            self._rng.shuffle(members)
        racks = sorted(by_rack, key=lambda r: self._rng.random())
        # Take bookies rack by rack in turn: consecutive ensemble slots (and so every
        # round-robin write set) land on different racks whenever racks allow.
        ensemble: list[str] = []
        while len(ensemble) < ensemble_size:
            for r in racks:
                if by_rack[r] and len(ensemble) < ensemble_size:
                    ensemble.append(by_rack[r].pop())
        return ensemble

    def replace_bookie(
        self,
        ensemble: Sequence[str],
        index: int,
        write_quorum: int,
        available: Mapping[str, BookieInfo],
        exclude: set[str],
    ) -> str:
        pool = _candidates(available, exclude | set(ensemble))
        if not pool:
            raise NotEnoughBookiesError(
                f"no writable bookie outside {list(ensemble)} to replace {ensemble[index]}"
            )
        # Prefer a bookie whose rack is absent from the write sets that include this slot.
        n = len(ensemble)
        neighbours = {
            rack_of(available.get(ensemble[(index + d) % n]))
            for d in range(-(write_quorum - 1), write_quorum)
            if d
        }
        good = [b for b in pool if rack_of(available[b]) not in neighbours]
        return self._rng.choice(good or pool)

    def violations(
        self, ensemble: Sequence[str], write_quorum: int, infos: Mapping[str, BookieInfo]
    ) -> list[str]:
        problems = super().violations(ensemble, write_quorum, infos)
        racks = {rack_of(infos.get(b)) for b in infos}
        want = min(write_quorum, len(racks))
        for start in range(len(ensemble)):
            ws = write_set_bookies(start, ensemble, write_quorum)
            spread = {rack_of(infos.get(b)) for b in ws}
            if len(spread) < want:
                problems.append(f"write set {ws} spans {len(spread)} rack(s), want {want}")
        return problems
