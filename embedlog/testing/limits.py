"""Knobs that bound what a seed draws, for shrinking a failing history and replaying it.

``--limit faults=3,entries=7`` runs the seed's own draws with each knob as a ceiling: the
scenario's ranges are cut down (fewer ledgers, recoveries, entries), the network loses
and stalls nothing (``loss=0``, ``spikes=0``), the nemesis stops after ``faults`` steps
and the metadata store after ``meta`` injected faults. A history under limits is as
deterministic as any other: the same seed and the same limits replay it exactly.
"""

from __future__ import annotations

import attrs
from attrs import frozen

from embedlog.testing.scenarios import Scenario

# name -> the smallest value that makes sense
KNOBS: dict[str, int] = {
    "ledgers": 1,  # writers (ledgers) at most
    "recoveries": 0,  # concurrent recoveries at most
    "entries": 1,  # entries each writer adds at most
    "faults": 0,  # nemesis steps (crashes, stops, restarts) before it stops
    "meta": 0,  # injected metadata faults (slow, failing, expired sessions)
    "loss": 0,  # 0: no message is lost
    "spikes": 0,  # 0: no message is held up past the request timeout
}


class LimitsError(ValueError):
    """A --limit that names no knob or gives a value that makes no sense (one line)."""


@frozen
class Limits:
    values: tuple[tuple[str, int], ...] = ()  # (knob, ceiling), in KNOBS order

    @classmethod
    def of(cls, **values: int) -> Limits:
        for k, v in values.items():
            if k not in KNOBS:
                raise LimitsError(f"unknown limit {k!r}; limits: {', '.join(KNOBS)}")
            if isinstance(v, bool) or not isinstance(v, int) or v < KNOBS[k]:
                raise LimitsError(f"limit {k} takes a whole number >= {KNOBS[k]}, got {v!r}")
            if k in ("loss", "spikes") and v != 0:
                raise LimitsError(f"limit {k} takes only 0 (none), got {v!r}")
        return cls(tuple((k, values[k]) for k in KNOBS if k in values))

    @classmethod
    def parse(cls, text: str) -> Limits:
        """``"faults=3,entries=7"`` (what ``str`` gives back)."""
        values: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, eq, value = part.partition("=")
            if not eq:
                raise LimitsError(f"--limit takes knob=value pairs, got {part!r}")
            try:
                number = int(value)
            except ValueError:
                raise LimitsError(
                    f"limit {name} takes a whole number >= {KNOBS.get(name, 0)}, got {value!r}"
                ) from None
            values[name.strip()] = number
        return cls.of(**values)

    def get(self, knob: str) -> int | None:
        return dict(self.values).get(knob)

    def with_(self, knob: str, value: int) -> Limits:
        return Limits.of(**{**dict(self.values), knob: value})

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values)

    def __bool__(self) -> bool:
        return bool(self.values)

    def apply(self, sc: Scenario) -> Scenario:
        v = dict(self.values)

        def cut(rng: tuple[int, int], ceiling: int | None) -> tuple[int, int]:
            if ceiling is None:
                return rng
            return (min(rng[0], ceiling), min(rng[1], ceiling))

        changes: dict[str, object] = {
            "ledgers": cut(sc.ledgers, v.get("ledgers")),
            "recoveries": cut(sc.recoveries, v.get("recoveries")),
            "entries": cut(sc.entries, v.get("entries")),
        }
        if "loss" in v:
            changes["loss"] = (0.0, 0.0)
        if "spikes" in v:
            changes["spikes"] = (0.0, 0.0)
        if "faults" in v:
            changes["fault_budget"] = v["faults"]
        if "meta" in v:
            changes["meta_budget"] = v["meta"]
        return attrs.evolve(sc, **changes)  # type: ignore[arg-type]
