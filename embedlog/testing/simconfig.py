"""A seed's cluster: the settings, quorums and network profile one history runs with.

Drawn from the seed alone, each value from a stream of its own (``seeded``) in a fixed
order, so that adding a draw to one scenario leaves the other scenarios' histories as
they were: the bookies' flush interval and group wait, the metadata delay, E and WQ, the
network's spikes and losses (``seeded(seed, "config")``); a race scenario's aimed faults,
a corrupt scenario's bit-flip rate and a change-aims scenario's aims each apart. An
unsafe switch adds its bookie, client and context settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from attrs import frozen

from embedlog.testing.scenarios import UNSAFE, Scenario
from embedlog.testing.simloop import seeded
from embedlog.testing.simnet import NetProfile
from embedlog.testing.simraces import RaceProfile
from embedlog.testing.simtrace import Trace

REQUEST_TIMEOUT = 1.0  # virtual seconds


@frozen
class SimConfig:
    bookie_settings: dict[str, Any]  # BookieConfig settings of every bookie
    client_options: Mapping[str, Any]  # Client options of every client
    context_options: Mapping[str, Any]  # ClientContext test-only settings
    metadata_delay: float | None  # drawn for the scenario (None: its one value stays)
    ensemble: int
    write_quorum: int
    ack_quorum: int
    profile: NetProfile
    races: RaceProfile | None  # a race scenario's aimed faults


def draw_config(seed: int, sc: Scenario, unsafe: str | None, trace: Trace) -> SimConfig:
    """The seed's configuration; ``trace`` gets the rates drawn apart, as they are drawn."""
    switch = UNSAFE[unsafe] if unsafe is not None else None
    cfg_rng = seeded(seed, "config")
    bookie_settings: dict[str, Any] = {
        "journal_write_data": sc.journal == "on",
        "flush_interval": cfg_rng.choice((0.02, 0.1, 0.5)),
        "journal_max_group_wait": cfg_rng.choice((0.0, 0.001, 0.005)),
        "repair_retry_interval": 0.5,
        **(switch.bookie if switch else {}),
    }
    delay = cfg_rng.choice(sc.metadata_delay) if len(sc.metadata_delay) > 1 else None
    ensemble = cfg_rng.choice((3, 3, 4))
    write_quorum = cfg_rng.choice([q for q in (2, 3) if q <= ensemble])
    profile = NetProfile(
        spike_probability=cfg_rng.uniform(*sc.spikes),
        spike=(0.05, 3 * REQUEST_TIMEOUT),
        loss_probability=cfg_rng.uniform(*sc.loss),
    )
    # The race scenarios' aimed faults, drawn from a stream of their own so that the
    # other scenarios' histories stay as they were.
    races = RaceProfile.draw(seeded(seed, "races")) if sc.races else None
    if sc.corrupt != (0.0, 0.0):  # drawn apart: the other scenarios draw as before
        corrupt = seeded(seed, "corrupt-config").uniform(*sc.corrupt)
        profile = attrs.evolve(profile, corrupt=corrupt)
        trace("corrupt-rate", f"{corrupt:.4f}")
    if sc.change_aims:  # drawn apart too (simchanges.py)
        aims = seeded(seed, "change-aims-config").choice(sc.change_aims)
        profile = attrs.evolve(profile, change_aims=aims)
        trace("change-aims", aims)
    if races is not None:
        ensemble, write_quorum = races.shape
        profile = attrs.evolve(
            profile,
            aimed_loss=races.aimed_loss,
            late_add=races.late_add,
            hold_fenced=races.hold_fenced,
        )
        if sc.journal == "off":
            bookie_settings["flush_interval"] = races.flush_interval
    return SimConfig(
        bookie_settings=bookie_settings,
        client_options=dict(switch.client) if switch else {},
        context_options=dict(switch.context) if switch else {},
        metadata_delay=delay,
        ensemble=ensemble,
        write_quorum=write_quorum,
        ack_quorum=2,
        profile=profile,
        races=races,
    )
