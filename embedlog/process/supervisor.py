"""A bookie process as its supervisor (``LocalCluster(processes=True)``) sees it: started
with ``embedlog bookie run``, stopped with SIGTERM, crashed with SIGKILL, paused with
SIGSTOP and resumed with SIGCONT.

The child reports through a ready file: its ZooKeeper session once it serves (so that a
crash can end that session at once, as ZooKeeper does when it times out), or the kind and
message of the error that kept it from starting (raised here as the same error). Its
output goes to ``bookie.log`` in its directory. It stops cleanly by itself when this
process goes away (the pipe on its stdin closes), and ``weakref.finalize`` kills it if
this interpreter exits with it still running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from embedlog import errors
from embedlog.process.settings import config_text

READY_FILE = "ready.json"
LOG_FILE = "bookie.log"
CONFIG_FILE = "bookie.toml"
START_TIMEOUT = 120.0  # a cold interpreter on a loaded machine, plus BP-46 phase one
STOP_TIMEOUT = 120.0  # a final flush of a full write cache


def error_of(kind: str, message: str) -> Exception:
    """The error a child reported, as the same class when embedlog has it."""
    if kind == "ValueError":
        return ValueError(message)
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.BKError):
        return cls(message)
    return RuntimeError(message)


def _kill(pid: int) -> None:
    """At interpreter exit: a child still running dies with its supervisor."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return


def _session_of(doc: dict[str, Any]) -> tuple[int, bytes] | None:
    sid = doc.get("session")
    return None if sid is None else (int(sid[0]), bytes.fromhex(sid[1]))


class BookieProcess:
    def __init__(
        self,
        bookie_id: str,
        bookie_dir: Path,
        metadata_uri: str,
        address: str,
        settings: dict[str, Any],
    ) -> None:
        """``settings``: BookieConfig settings, written to the child's config file."""
        self.bookie_id = bookie_id
        self.dir = bookie_dir
        self.metadata_uri = metadata_uri
        self.address = address
        self.settings = settings
        self.proc: subprocess.Popen[bytes] | None = None
        self.session: tuple[int, bytes] | None = None
        self.paused = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        """Start the child; ``wait_ready`` waits for it to serve."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / READY_FILE).unlink(missing_ok=True)
        config = self.dir / CONFIG_FILE
        config.write_text(config_text({k: v for k, v in self.settings.items()}))
        args = [
            sys.executable, "-m", "embedlog", "bookie", "run",
            "--data-dir", str(self.dir),
            "--metadata-uri", self.metadata_uri,
            "--listen", self.address,
            "--id", self.bookie_id,
            "--config", str(config),
            "--ready-file", str(self.dir / READY_FILE),
            "--stop-on-stdin-eof",
        ]  # fmt: skip
        with (self.dir / LOG_FILE).open("ab") as log:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(),
                start_new_session=True,  # a Ctrl-C at the terminal is for the supervisor
            )
        self.paused = False
        self.session = None
        self._finalizer = weakref.finalize(self, _kill, self.proc.pid)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until the child serves; its start error (same class) if it could not."""
        assert self.proc is not None
        ready = self.dir / READY_FILE
        deadline = time.monotonic() + timeout
        while True:
            if ready.exists():
                doc = json.loads(ready.read_text())
                if "error" in doc:
                    self._reap()
                    error = error_of(doc["error"], f"bookie {self.bookie_id}: {doc['message']}")
                    if isinstance(error, errors.CookieError):
                        error.add_note(
                            "with LocalCluster: cluster.start_bookie(bookie_id, "
                            "auto_fix_cookies=True) is --auto-fix-cookies"
                        )
                    raise error
                self.session = _session_of(doc)
                return
            if self.proc.poll() is not None:
                self._reap()
                raise RuntimeError(
                    f"bookie {self.bookie_id}'s process exited ({self.proc.returncode}) before "
                    f"it served; its log {self.dir / LOG_FILE} ends:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(
                    f"bookie {self.bookie_id}'s process did not serve within {timeout:g}s; "
                    f"its log {self.dir / LOG_FILE} ends:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.dir / LOG_FILE).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM: the clean shutdown. BookieIOError if its final flush failed."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self._reap()
            return
        self.resume()
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(
                f"bookie {self.bookie_id}'s process did not stop within {timeout:g}s of "
                "SIGTERM and was killed; its next boot replays its journal"
            ) from None
        self._reap()
        if proc.returncode not in (0, -signal.SIGTERM):
            raise errors.BookieIOError(
                f"bookie {self.bookie_id} stopped, but not cleanly (exit {proc.returncode}); "
                f"its log {self.dir / LOG_FILE} ends:\n{self.log_tail(5)}"
            )

    def current_session(self) -> tuple[int, bytes] | None:
        """The ZooKeeper session that holds the registration now: the child reports a new
        one in its ready file each time it registers again after an expiry."""
        try:
            doc = json.loads((self.dir / READY_FILE).read_text())
        except (OSError, ValueError):
            return self.session
        if "error" not in doc:
            self.session = _session_of(doc)
        return self.session

    def kill(self) -> None:
        """SIGKILL: a crash. Whatever its disks had not made durable is gone."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()  # a stopped process dies of SIGKILL too
            proc.wait()
        self._reap()

    def pause(self) -> None:
        """SIGSTOP: it answers nothing and loses nothing until ``resume``. Returns once the
        kernel has stopped it (signals are delivered asynchronously)."""
        if self.proc is not None and self.running:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True
            self._wait_state(stopped=True)

    def resume(self) -> None:
        if self.proc is not None and self.paused and self.running:
            self.proc.send_signal(signal.SIGCONT)
            self._wait_state(stopped=False)
        self.paused = False

    def _wait_state(self, *, stopped: bool, timeout: float = 5.0) -> None:
        stat = Path(f"/proc/{self.pid}/stat")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state = stat.read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                return  # no /proc (not Linux), or the process is gone
            if (state in ("T", "t")) == stopped:
                return
            time.sleep(0.002)

    def _reap(self) -> None:
        proc = self.proc
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if self._finalizer is not None:
            self._finalizer.detach()
        self.paused = False


def _child_env() -> dict[str, str]:
    """The child imports the embedlog this process runs, wherever it was imported from."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    parts = [root, *(p for p in path.split(os.pathsep) if p and p != root)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(parts))
