"""Faults aimed at protocol moments: the race scenarios' knobs (``Scenario.races``).

The everyday scenarios draw every fault independently of what the message or the
moment is, so an interleaving that needs three or four particular coincidences (a
fence lost, an add late at the same bookie, a bookie wiped between a recovery and the
writer's next add) is reached once in thousands of seeds. The race scenarios aim
their faults, as FoundationDB's BUGGIFY does, at the messages and moments where the
protocol's rules decide something, with rates drawn per seed (each seed a different
mix, some of them none):

* **aimed losses**: requests of one kind (``Request.kind``: fences, recovery reads,
  adds) lost at their own rate, on top of the network's everyday losses;
* **late adds**: an add (or batch) held up on its way to a bookie for a while that
  stays under the request timeout, so the writer is still waiting for its answer when
  it lands, after whatever overtook it on other connections (a recovery, a takeover);
* **writer pauses**: a writer goes quiet between two adds (the nemesis and recoveries
  act meanwhile), then writes to an ensemble that may have changed under it; most
  often right after the network held one of its adds up;
* **aimed crashes**: the nemesis picks its victim among the bookies a recovery or a
  takeover just asked (a fence, a recovery read), or to which a request was just
  lost, rather than among all the bookies; and a **strike** takes down at once (within
  0.1 s, for up to 0.6 s, crashed when the lossy budget allows, maybe wiped) a bookie
  just fenced or just missing an add;
* **aimed recoveries**: a recovery or a takeover waits for the next late add and starts
  on its ledger at once, while that add is on its way;
* ensembles with E > WQ > AQ more often (the races of streams need both);
* a slower flush of the write cache (journal off: more acknowledged entries that a
  crash loses) and more wiped disks;
* **blind spots**: an aimed recovery or takeover loses its fence (or, for a while,
  every request) to the bookie the late add it started at is held up for, so that
  bookie is left unfenced while the others cover the fence (TLA+ Defect 1, BP-46
  scenario 1);
* **gates**: with the fence lost, the late add (and what follows it from its writer)
  waits at its bookie until that bookie answered a recovery read of the ledger, so the
  recovery reads the entry there before the old writer's add lands;
* **late refusals**: an add to a bookie that a recovery or a takeover fenced is held
  up, so the refusal reaches the old writer after what its unfenced bookies answer
  (a refusal that came first would end the writer before it could be acknowledged);
* **compound aims** (simcombos.py): several of these in one order at one ledger, for
  the histories that need them all (BP-46 scenario 1; issue #12's dirty leftover);
* **displaced writes** (streams): a write of a stream's metadata in an older term (a
  displaced writer's rollover or ensemble change, a trim) that reaches the store while a
  newer term's takeover is under way (IN_RECOVERY) waits there until a newer term opened;
  and an aimed takeover may start at a write of the stream's own term that changes its
  last fragment, which waits for it the same way. The writer loses its compare-and-swap
  to an open newer term and must see it is no longer the writer, not merely a recovery
  in progress;
* a probe at the end: every bookie of a write set is asked for each of its entries
  (a stream's acknowledged ones, every entry of a closed bounded ledger), so that a
  negative for an entry a bookie acknowledged (``NoNegativeForAckedEntry``) does not
  hide behind a reader that asked another.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, deque
from collections.abc import Callable

from attrs import frozen

from embedlog.errors import NoSuchLedgerInMetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.wire.messages import ReadFlags, Request

# Request kinds (``Request.kind``) whose losses the races aim at, and the rates drawn.
AIMED_LOSS_RATES: dict[str, tuple[float, ...]] = {
    "fence": (0.0, 0.2, 0.5),
    "recovery_read": (0.0, 0.1, 0.3),
    "add": (0.0, 0.05, 0.15),
}
LATE_ADD_RATES = (0.0, 0.1, 0.3)
# Under the simulation's request timeout (1 s): the writer still takes the answer.
LATE = (0.01, 0.8)
PAUSE_RATES = (0.02, 0.05, 0.1)
PAUSE_ON_LATE_RATES = (0.3, 0.7)  # the same, right after one of the writer's adds was held up
PAUSE = (0.1, 1.5)  # seconds a pausing writer stays quiet
AIM_RATES = (0.0, 0.5, 0.9)  # how often a nemesis crash or stop picks an aimed victim
# Bookies a recovery or a takeover asked, or whose request was lost, this long ago at most
# are aimed at.
AIM_WINDOW = 0.5
STRIKE_RATES = (0.0, 0.1, 0.3)  # how often an aimed request's bookie is struck at once
STRIKE_AFTER = (0.0, 0.1)  # seconds between the aimed request and the strike
STRIKE_DOWN = (0.05, 0.6)  # seconds a struck bookie stays down
AIM_RECOVERY_RATES = (0.5, 0.9)  # how often a recovery or a takeover waits for a late add
AIM_RECOVERY_WAIT = 3.0  # seconds it waits at most
# (ensemble, write quorum), AQ 2: E > WQ > AQ twice as often as the everyday draws, since
# races of streams (issue #12) need both.
SHAPES = ((3, 2), (3, 3), (4, 3), (4, 3))
FLUSH_INTERVALS = (0.5, 1.0, 2.0)  # journal off: acknowledged entries stay unflushed longer
WIPE_RATES = (0.3, 0.5)
# What an aimed recovery or takeover loses to the late add's bookie: nothing, its fence
# (once), or every request for BLIND_FOR seconds (a partial partition).
BLIND_MODES = ("", "fence", "all")
BLIND_FOR = (0.3, 2.0)
HOLD_FENCED_RATES = (0.0, 0.5, 1.0)  # how often an add to a fenced bookie is held up (LATE)
# A gate opens this long after it closed at the latest: under the request timeout (1 s), so
# the writer still takes the answer of what it held.
GATE_FOR = 0.9
GATED = ("add", "write_lac")  # what a gate holds: the old writer's requests, not recovery's
# Compound aims (simcombos.py): how often a bounded ledger's writer goes quiet once, early,
# for a recovery blind to one bookie and a wiped reboot of another.
WIPED_REBOOT_RATES = (0.3, 0.7, 0.0, 0.0)
# ... and how often a stream's term writer (E > WQ > AQ) is cut off from all but one
# bookie while another client takes the stream over (the dirty leftover).
DIRTY_LEFTOVER_RATES = (0.0, 0.0, 0.3, 0.7)


# How often a displaced stream writer's metadata write waits for the takeover (drawn per
# seed, apart from RaceProfile: the bounded scenarios' draws and traces stay as they were),
# and how long at most.
HOLD_DISPLACED_RATES = (0.0, 0.5, 1.0)
HOLD_DISPLACED_FOR = 3.0
HOLD_LINGER = (0.0, 1.0)  # seconds a held write still waits once the newer term opened
HOLD_POLL = 0.05


@frozen
class RaceProfile:
    aimed_loss: tuple[tuple[str, float], ...]  # (request kind, loss probability)
    late_add: float  # probability an add is held up (LATE)
    pause: float  # probability a writer pauses (PAUSE) after an add
    pause_on_late: float  # the same, after an add of its ledger that the network held up
    aim: float  # probability a nemesis step picks an aimed victim
    strike: float  # probability an aimed request's bookie goes down at once (a strike)
    aim_recovery: float  # probability a recovery or a takeover starts at a late add
    shape: tuple[int, int]  # (ensemble, write quorum)
    flush_interval: float
    wipe: float
    blind: str  # BLIND_MODES
    hold_fenced: float  # probability an add to a bookie fenced for its ledger is held up
    wiped_reboot: float  # probability per writer of simcombos' wiped reboot (bounded ledgers)
    dirty_leftover: float  # probability per term writer of simcombos' dirty leftover (streams)

    @classmethod
    def draw(cls, rng: random.Random) -> RaceProfile:
        return cls(
            aimed_loss=tuple((k, rng.choice(r)) for k, r in AIMED_LOSS_RATES.items()),
            late_add=rng.choice(LATE_ADD_RATES),
            pause=rng.choice(PAUSE_RATES),
            pause_on_late=rng.choice(PAUSE_ON_LATE_RATES),
            aim=rng.choice(AIM_RATES),
            strike=rng.choice(STRIKE_RATES),
            aim_recovery=rng.choice(AIM_RECOVERY_RATES),
            shape=rng.choice(SHAPES),
            flush_interval=rng.choice(FLUSH_INTERVALS),
            wipe=rng.choice(WIPE_RATES),
            # Drawn last: the draws above stay what they were before these knobs.
            blind=rng.choice(BLIND_MODES),
            hold_fenced=rng.choice(HOLD_FENCED_RATES),
            # The compound aims: drawn after every knob above, which keep their draws.
            wiped_reboot=rng.choice(WIPED_REBOOT_RATES),
            dirty_leftover=rng.choice(DIRTY_LEFTOVER_RATES),
        )


def aimed_loss(profile: tuple[tuple[str, float], ...], kind: str) -> float:
    """The aimed loss rate of requests of ``kind`` (0 for kinds not aimed at)."""
    return next((p for k, p in profile if k == kind), 0.0)


def aimed(req: Request, fate: str) -> bool:
    """Whether the nemesis may aim at the bookie ``req`` went to: a recovery's or a
    takeover's fence or read (where the protocol decides what the ledger holds), or a
    request lost on its way (the bookie now misses something its peers have)."""
    return fate == "lost" or req.kind in ("fence", "recovery_read", "recovery_add")


def fences(req: Request) -> bool:
    """Whether ``req`` fences its ledger on the bookie it reaches (a fence or a term
    raise, or a recovery read with the fence flag)."""
    return req.kind == "fence" or (
        req.kind == "recovery_read" and bool(req.flags & ReadFlags.FENCE)
    )


def strikes_at(req: Request, fate: str) -> bool:
    """Whether a strike may follow ``req``: a fence (the bookie a recovery or a takeover
    just fenced goes down, maybe with its disks) or an add lost on its way (the bookie
    goes down before the writer resends it)."""
    return req.kind == "fence" or (fate == "lost" and req.kind == "add")


class Targets:
    """Bookies the nemesis may aim at: those asked by a recovery or a takeover, or whose
    request was lost, within the last AIM_WINDOW virtual seconds (newest last)."""

    def __init__(self) -> None:
        self._recent: deque[tuple[float, str]] = deque()

    def note(self, now: float, bookie: str) -> None:
        self._recent.append((now, bookie))
        while self._recent and self._recent[0][0] < now - AIM_WINDOW:
            self._recent.popleft()

    def among(self, now: float, candidates: list[str]) -> list[str]:
        """The recently noted bookies among ``candidates``, in ``candidates``' order."""
        recent = {b for t, b in self._recent if t >= now - AIM_WINDOW}
        return [b for b in candidates if b in recent]


class Gates:
    """Bookies at which a ledger's writes wait (``GATED`` requests, in their order) until
    the bookie answered a recovery read of that ledger, or until the gate's time is up."""

    def __init__(self) -> None:
        self._until: dict[tuple[str, int], float] = {}
        self._held: dict[tuple[str, int], list[Callable[[], None]]] = {}

    def __bool__(self) -> bool:
        return bool(self._until)

    def close(self, bookie: str, ledger: int, until: float) -> None:
        self._until[(bookie, ledger)] = until

    def holds(self, now: float, bookie: str, req: Request) -> bool:
        until = self._until.get((bookie, req.ledger_id))
        return until is not None and now < until and req.kind in GATED

    def hold(self, bookie: str, ledger: int, deliver: Callable[[], None]) -> None:
        self._held.setdefault((bookie, ledger), []).append(deliver)

    def open(self, bookie: str, ledger: int) -> list[Callable[[], None]]:
        """Open the gate; what it held, to be delivered in order."""
        self._until.pop((bookie, ledger), None)
        return self._held.pop((bookie, ledger), [])

    def open_all(self) -> list[Callable[[], None]]:
        held = [d for key in sorted(self._held) for d in self._held[key]]
        self._until.clear()
        self._held.clear()
        return held


class DisplacedWrites:
    """The displaced-writes aims (``SimMetadataExecutor.hold``): given a metadata call,
    whether it waits at the store, and until what.

    A stream's writer learns of a takeover from the bookies (EINVALIDTERM) or when its
    compare-and-swap of the ledger's metadata loses; after the loss it reads the metadata
    again and must check it is still the writer. Left alone, the takeover has usually not
    finished by then (IN_RECOVERY), or has not begun: held until it has, the writer reads
    an OPEN stream in a newer term, whose metadata it must not write its own fragment into.
    Two ways in: a writer's write that reaches the store during a takeover waits for its
    end; and an aimed takeover (``next_write``) starts at a writer's write, which waits
    for it.
    """

    def __init__(
        self,
        truth: MetadataClient,
        rng: random.Random,
        rate: float,
        decide: Callable[..., bool],
        trace: Callable[..., None],
        counts: Counter[str],
    ) -> None:
        self._truth = truth
        self._rng = rng
        self._rate = rate
        self._decide = decide
        self._trace = trace
        self._counts = counts
        self._takeovers: list[asyncio.Future[int]] = []  # aimed takeovers waiting

    async def next_write(self, limit: float) -> int | None:
        """An aimed takeover (now and then): the stream whose writer next writes its
        metadata, that write held until a takeover opened a newer term (None: not aimed,
        or no write within ``limit`` seconds)."""
        if self._rate <= 0 or self._rng.random() >= self._rate:
            return None
        moment: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._takeovers.append(moment)
        try:
            await asyncio.wait([moment], timeout=limit)
        finally:
            # Timed out, or the taker cancelled (the history's limit): no write waits for it.
            if not moment.done():
                moment.cancel()
                self._takeovers.remove(moment)
        return moment.result() if not moment.cancelled() else None

    def __call__(self, fn: Callable[..., object], args: tuple[object, ...]) -> Hold | None:
        if getattr(fn, "__name__", None) != "write_ledger" or not args:
            return None
        md = args[0]
        if not isinstance(md, LedgerMetadata) or not md.unbounded:
            return None
        now = self._stored(md.ledger_id)
        if now is None or now.term < md.term:
            return None
        if now.term == md.term:  # the writer's own: an aimed takeover may start here
            new_fragment = md.fragments[-1:] != now.fragments[-1:]  # a rollover, a change
            if now.state is not LedgerState.OPEN or not new_fragment or not self._takeovers:
                return None
            why = "aimed"
        elif now.state is LedgerState.IN_RECOVERY:
            if self._rng.random() >= self._rate:
                return None
            why = "recovering"
        else:
            return None
        if not self._decide("hold-displaced", why, md.ledger_id, md.term, now.term):
            return None
        if why == "aimed":
            self._takeovers.pop(0).set_result(md.ledger_id)
        self._counts[f"aim.hold_displaced.{why}"] += 1
        self._trace("hold-displaced", why, md.ledger_id, md.term, now.term)
        # After the newer term opened, its writer has a moment to append before the
        # displaced write lands: what a write into its metadata would then hide.
        linger = self._rng.uniform(*HOLD_LINGER)
        opened: list[float] = []
        loop = asyncio.get_running_loop()

        def done() -> bool:
            if not opened and self._taken_over(md.ledger_id, md.term):
                opened.append(loop.time())
            return bool(opened) and loop.time() >= opened[0] + linger

        return Hold(done, HOLD_DISPLACED_FOR + linger)

    def _stored(self, ledger_id: int) -> LedgerMetadata | None:
        try:
            return self._truth.read_ledger(ledger_id)
        except NoSuchLedgerInMetadataError:  # deleted: nothing to wait for
            return None

    def _taken_over(self, ledger_id: int, term: int) -> bool:
        """Whether a takeover from ``term`` is over (a newer term opened, or the stream
        is gone)."""
        now = self._stored(ledger_id)
        if now is None:
            return True
        if now.term > term and now.state is LedgerState.OPEN:
            self._counts["aim.hold_displaced.opened"] += 1
            return True
        return False


@frozen
class Hold:
    """A metadata call waits at the store until ``done()`` (polled) or ``longest`` seconds."""

    done: Callable[[], bool]
    longest: float
