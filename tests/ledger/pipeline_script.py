"""Scripts of events fed to the add pipeline, and the effects it left, as text.

A script (tests/ledger/pipeline_scripts/*.txt) is a series of blocks in the style of etcd's
raft ``interaction_env`` data-driven tests: a command, ``----``, and the effects it
left, as printed here. ``EMBEDLOG_REWRITE=1`` rewrites the expected part from what the
pipeline does now (then read the diff).

The harness plays the writer's part (writer.py) with no loop, no sockets and no
metadata store: it carries out each effect as the writer does (completing ``done`` and
then ``progressed``; after a completion, sending the queue), and the replacement's
steps are commands, so a script can put an answer between any two of them.

Commands (entries are ids; bookies are named b1, b2, ...; ``now`` defaults to 0):

    new E=3 WQ=3 AQ=2 [stream term=T lafr=L gwq recovery max-entries=N]
        [window=N timeout=S unsafe=ack-during-replacement|ack-from-replaced-bookie]
    add N                       queue N entries
    send                        the writer's turn to send the queue
    ok BOOKIE IDS [term=T]      one EOK of term T (default: the writer's) for a batch
    answer BOOKIE ID=STATUS[/TERM] ...   one answer per entry (a batch's results)
    lost BOOKIE ID [now=S] [tls]         no answer to the add (or batch) of ID
    plan                        the change chooses what to replace (after "change: start")
    commit OLD=NEW ... [unready=NEW] [in-memory]   the new fragment is committed
    none-found                  no replacement was available
    cas-lost                    another client changed the metadata first
    abort                       the replacement raised
    end                         the change is over (the writer sends the queue)
    retry BOOKIE [now=S]        the pause of a retried bookie is over
    readied BOOKIES [unready=BOOKIES] from=ID [now=S]   new members were readied
    state                       phase, LAC, LAFR and what is pending
"""

from __future__ import annotations

import shlex
from pathlib import Path

from embedlog.errors import BKTimeoutError, TlsHandshakeError
from embedlog.ledger.pending import PendingAdd
from embedlog.ledger.phase import Replacement, Retry
from embedlog.ledger.pipeline import AddPipeline
from embedlog.ledger.policy import AddPolicy, BoundedPolicy
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded.policy import StreamPolicy
from embedlog.unbounded.retention import Rollover, SegmentCounter
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import NO_TERM


class DoneRecorder:
    """Stands for the caller's future: the harness prints outcomes from ``done``."""

    def set_result(self, value: int) -> None:
        pass

    def set_exception(self, exc: BaseException) -> None:
        pass

    def done(self) -> bool:
        return False


class Harness:
    def __init__(self) -> None:
        self.pl: AddPipeline | None = None
        self.adds: dict[int, PendingAdd] = {}
        self.slots: dict[str, int] = {}  # the slot each bookie was last sent an add as
        self.plan: Replacement | None = None
        self.retry: Retry | None = None

    # -- running ------------------------------------------------------------------------------

    def run(self, command: str) -> str:
        words = shlex.split(command)
        name, args = words[0], words[1:]
        flags = {a for a in args if "=" not in a}
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        now = float(opts.pop("now", 0))
        out: list[str] = []
        handler = getattr(self, "cmd_" + name.replace("-", "_"))
        handler(args, flags, opts, now, out)
        if self.pl is not None:
            self.carry_out(out)
        return "\n".join(out) if out else "ok"

    def carry_out(self, out: list[str]) -> None:
        """Drain the pipeline's effects as the writer does, printing them."""
        pl = self.pl
        assert pl is not None
        while True:
            if pl.done:
                done, pl.done = pl.done, []
                out.append("complete " + ids(done))
                pl.progressed()
                if pl.waiting:
                    pl.send_queued()
                continue
            if pl.failures:
                failures, pl.failures = pl.failures, []
                for error, adds in failures:
                    out.append(f"fail {ids(adds) or '(none pending)'}: {type(error).__name__}")
                continue
            break
        if pl.outbox:
            outbox, pl.outbox = pl.outbox, {}
            pl.outbox_resends = False
            for (bookie, idx), queued in outbox.items():
                self.slots[bookie] = idx
                items = list(dict.fromkeys(p for p in queued if p.framed))
                out.append(f"send {bookie}/{idx}: {ids(items)}")
        if pl.direct:
            direct, pl.direct = pl.direct, []
            for p, idx, bookie in direct:
                self.slots[bookie] = idx
                out.append(f"send-one {bookie}/{idx}: {p.entry_id}")
        if pl.start_change:
            pl.start_change = False
            out.append("change: start")
        if pl.retries:
            retries, pl.retries = pl.retries, []
            out.append("retry later: " + " ".join(sorted(retries)))
        if pl.rollover is not None:
            out.append(f"rollover at {pl.rollover}")
            pl.rollover = None

    # -- commands -----------------------------------------------------------------------------

    def cmd_new(self, args, flags, opts, now, out) -> None:
        e, wq, aq = int(opts["E"]), int(opts["WQ"]), int(opts["AQ"])
        term = int(opts.get("term", NO_TERM))
        ensemble = tuple(f"b{i + 1}" for i in range(e))
        md = LedgerMetadata(1, e, wq, aq, ((0, ensemble),), term=term, unbounded="stream" in flags)
        lac = int(opts.get("lac", -1))
        policy: AddPolicy
        if "stream" in flags:
            policy = StreamPolicy(
                term=term,
                lafr=int(opts.get("lafr", lac)),
                gwq="gwq" in flags,
                recovery="recovery" in flags,
                segment=SegmentCounter(Rollover(), started=0.0),
                fragment_max_entries=int(opts["max-entries"]) if "max-entries" in opts else None,
                listed_at_start=frozenset(ensemble) if "recovery" in flags else frozenset(),
                suspect_seconds=10.0,
            )
        else:
            policy = BoundedPolicy()
        unsafe = opts.get("unsafe", "")
        self.pl = AddPipeline(
            md,
            policy,
            term=term,
            lac=lac,
            max_outstanding=int(opts.get("window", 1000)),
            quorum_timeout=float(opts.get("timeout", 60)),
            unsafe_ack_during_replacement=unsafe == "ack-during-replacement",
            unsafe_ack_from_replaced_bookie=unsafe == "ack-from-replaced-bookie",
        )
        out.append(f"ensemble {' '.join(ensemble)} from 0")

    def cmd_add(self, args, flags, opts, now, out) -> None:
        pl = self.pipeline()
        first = pl.next_entry_id
        for _ in range(int(args[0])):
            eid = pl.next_entry_id
            pl.next_entry_id += 1
            p = PendingAdd(eid, b"frame%d" % eid, DoneRecorder(), 0, 0)  # type: ignore[arg-type]
            p.created = now
            self.adds[eid] = p
            pl.queue(p)
        out.append(f"queued {first}..{pl.next_entry_id - 1}")

    def cmd_send(self, args, flags, opts, now, out) -> None:
        self.pipeline().send_queued()

    def cmd_ok(self, args, flags, opts, now, out) -> None:
        pl = self.pipeline()
        bookie, run = args[0], [self.adds[int(a)] for a in args[1:] if "=" not in a]
        term = int(opts.get("term", pl.term))
        pl.on_all_ok(run, self.slots[bookie], bookie, term)

    def cmd_answer(self, args, flags, opts, now, out) -> None:
        pl = self.pipeline()
        bookie = args[0]
        run, results = [], []
        for a in args[1:]:
            eid, verdict = a.split("=", 1)
            if not eid.isdigit():
                continue
            status, _, term = verdict.partition("/")
            run.append(self.adds[int(eid)])
            results.append((StatusCode[status], int(term) if term else pl.term))
        pl.on_results(run, self.slots[bookie], bookie, results, now)

    def cmd_lost(self, args, flags, opts, now, out) -> None:
        exc = TlsHandshakeError("handshake refused") if "tls" in flags else BKTimeoutError("t")
        self.pipeline().no_answer(exc, self.adds[int(args[1])], args[0], now)

    def cmd_plan(self, args, flags, opts, now, out) -> None:
        pl = self.pipeline()
        self.plan = pl.plan_replacement()
        if self.plan is None:
            out.append("nothing to replace")
            return
        slots = [f"{b} (slot {self.plan.ensemble.index(b)})" for b in sorted(self.plan.failed)]
        excluded = sorted(pl.exclusions(self.plan, now))
        out.append(f"replace {', '.join(slots)} from {self.plan.first}; exclude {excluded}")

    def cmd_commit(self, args, flags, opts, now, out) -> None:
        pl, plan = self.pipeline(), self.plan
        assert plan is not None, "commit without a plan"
        ensemble = list(plan.ensemble)
        replaced: dict[int, str] = {}
        for a in args:
            old, _, new = a.partition("=")
            if old in ensemble:
                idx = ensemble.index(old)
                ensemble[idx] = new
                replaced[idx] = new
        unready = set(opts.get("unready", "").split(",")) - {""}
        ready = set(replaced.values()) - unready
        pl.readied(ready, unready, plan.first, now)  # as the writer's readying ends
        for idx in [i for i, nb in replaced.items() if nb not in ready]:
            ensemble[idx] = plan.ensemble[idx]
            del replaced[idx]
        new_md = plan.md.with_ensemble(plan.first, tuple(ensemble)) if replaced else None
        pl.replaced(plan, new_md, replaced, ready)
        if new_md is not None:
            out.append(f"ensemble {' '.join(ensemble)} from {plan.first}")
        self.after_replacement(out)

    def cmd_none_found(self, args, flags, opts, now, out) -> None:
        pl, plan = self.pipeline(), self.plan
        assert plan is not None
        pl.replaced(plan, None, {}, set())
        self.after_replacement(out)

    def cmd_cas_lost(self, args, flags, opts, now, out) -> None:
        pl, plan = self.pipeline(), self.plan
        assert plan is not None
        pl.replacement_lost(plan, plan.md.evolve(custom_metadata={"touched": b"1"}))
        self.after_replacement(out)

    def cmd_abort(self, args, flags, opts, now, out) -> None:
        self.pipeline().replacement_aborted()
        self.plan = None
        out.append(f"phase {self.pipeline().phase.value}")

    def after_replacement(self, out: list[str]) -> None:
        """As the writer's change loop: count what was held back, then the next round."""
        pl = self.pipeline()
        self.plan = None
        if pl.error is None:
            pl.resumed()
        if pl.failed and pl.error is None:
            out.append("change: again for " + " ".join(sorted(pl.failed)))

    def cmd_end(self, args, flags, opts, now, out) -> None:
        pl = self.pipeline()
        pl.end_change()
        pl.send_queued()

    def cmd_retry(self, args, flags, opts, now, out) -> None:
        self.retry = self.pipeline().retry_due(args[0], now)
        if self.retry is not None:
            out.append(f"ready {self.retry.bookie} from {self.retry.cut} first")

    def cmd_readied(self, args, flags, opts, now, out) -> None:
        pl = self.pipeline()
        ready = {a for a in args if "=" not in a}
        unready = set(opts.get("unready", "").split(",")) - {""}
        if self.retry is not None:
            retry, self.retry = self.retry, None
            pl.readied(ready, unready, retry.cut, now)
            pl.retry_readied(retry, ready)
            return
        pl.readied(ready, unready, int(opts["from"]), now)

    def cmd_state(self, args, flags, opts, now, out) -> None:
        pl = self.pipeline()
        line = f"phase {pl.phase.value}; lac {pl.lac}"
        if isinstance(pl.policy, StreamPolicy):
            line += f"; lafr {pl.policy.lafr}"
        out.append(line)
        for p in pl.pending:
            acks = [pl.md.ensemble_for(p.entry_id)[i] for i in range(32) if p.has_ack(i)]
            out.append(
                f"  {p.entry_id}: acks {' '.join(acks) or '-'}{'' if p.sent else ' (waiting)'}"
            )
        if pl.error is not None:
            out.append(f"  failed: {type(pl.error).__name__}")

    def pipeline(self) -> AddPipeline:
        assert self.pl is not None, "a script starts with new"
        return self.pl


def ids(adds: list[PendingAdd]) -> str:
    return " ".join(str(p.entry_id) for p in adds)


def parse(text: str) -> list[tuple[str, str]]:
    """(command, expected output) blocks; lines starting with # outside output are notes."""
    blocks: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            i += 1
            continue
        command = line.strip()
        assert lines[i + 1] == "----", f"line {i + 2}: expected ---- after {command!r}"
        i += 2
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        blocks.append((command, "\n".join(expected)))
    return blocks


def run_script(path: Path) -> tuple[str, list[tuple[str, str, str]]]:
    """The script with the actual output in place of the expected, and the mismatches."""
    harness = Harness()
    text = path.read_text()
    blocks = parse(text)
    rewritten: list[str] = []
    mismatches = []
    # Notes (# lines) are kept where they are: each block is rewritten in place.
    chunks = text.split("\n\n")
    b = 0
    for chunk in chunks:
        body = [ln for ln in chunk.splitlines() if not ln.startswith("#")]
        notes = [ln for ln in chunk.splitlines() if ln.startswith("#")]
        if not any(ln.strip() for ln in body):
            rewritten.append(chunk)
            continue
        command, expected = blocks[b]
        b += 1
        actual = harness.run(command)
        if actual != expected:
            mismatches.append((command, expected, actual))
        rewritten.append("\n".join([*notes, command, "----", actual]))
    return "\n\n".join(rewritten).rstrip("\n") + "\n", mismatches
