"""A real standalone ZooKeeper server process: for ``embedlog sandbox`` and the tests.

ZooKeeper comes from Debian's ``zookeeper`` package (``apt-get install -y
zookeeper``: jars in /usr/share/java). ``ZOOKEEPER_HOME`` (an Apache tarball,
jars in lib/) or ``ZOOKEEPER_CLASSPATH`` override that; ``JAVA_HOME`` picks the JVM.

The tests' fixtures (tests/zkserver.py) start throwaway servers on a free port;
the sandbox keeps one under its data directory on a fixed port, so that the
metadata (and the bookies' cookies in it) survive a restart of the sandbox.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

INSTALL_HINT = "apt-get update && apt-get install -y zookeeper"
_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
_START_TIMEOUT = 60.0  # a cold JVM on a loaded CI machine is slow


class ZooKeeperNotInstalled(RuntimeError):
    pass


def find_classpath() -> str:
    """The classpath of an installed ZooKeeper server, or ZooKeeperNotInstalled."""
    if explicit := os.environ.get("ZOOKEEPER_CLASSPATH"):
        return explicit
    jars: list[Path] = []
    if home := os.environ.get("ZOOKEEPER_HOME"):
        jars = sorted(Path(home).glob("lib/*.jar")) + sorted(Path(home).glob("*.jar"))
    else:
        debian = Path("/usr/share/java/zookeeper.jar")
        if debian.exists():
            # Debian's jar names its dependencies in its manifest Class-Path; add
            # only an slf4j binding so the server's log reaches our log file.
            jars = [debian]
            jars += [p for p in [Path("/usr/share/java/slf4j-simple.jar")] if p.exists()]
    if not any("zookeeper" in p.name for p in jars):
        where = f"ZOOKEEPER_HOME={home}" if home else "/usr/share/java/zookeeper.jar"
        raise ZooKeeperNotInstalled(
            f"ZooKeeper is not installed (no zookeeper jar in {where}; ZOOKEEPER_CLASSPATH "
            f"is not set). Install it with: {INSTALL_HINT}"
        )
    return os.pathsep.join(str(p) for p in jars)


def find_java() -> str:
    if home := os.environ.get("JAVA_HOME"):
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotInstalled(f"no java executable found; install ZooKeeper: {INSTALL_HINT}")
    return java


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter(port: int, cmd: bytes = b"ruok", timeout: float = 2.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(cmd)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


class ZooKeeperServer:
    """One standalone ZooKeeper server process."""

    def __init__(self, workdir: Path, port: int = 0) -> None:
        """``port`` 0 picks a free port (and retries if another process takes it first);
        a fixed port keeps the URI, and the data under ``workdir``, the same across runs."""
        # Absolute: the JVM runs in ``workdir`` and is given the config's path, so a
        # relative one would name a file under workdir/workdir.
        self.workdir = Path(workdir).absolute()
        self.port = port
        self._fixed_port = port
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "zookeeper.log"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def uri(self, chroot: str = "/embedlog") -> str:
        return f"zk://{self.hosts}{chroot}"

    def ruok(self) -> bool:
        try:
            return four_letter(self.port) == b"imok"
        except OSError:
            return False

    def serving(self) -> bool:
        """Whether the server accepts sessions: ``ruok`` says imok before it does."""
        try:
            return self.ruok() and b"Mode:" in four_letter(self.port, b"srvr")
        except OSError:
            return False

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        classpath, java = find_classpath(), find_java()
        # The port is picked before the JVM binds it, so another process can take it
        # in between; then the server dies at once and we try another port.
        last_error = ""
        for _attempt in range(1 if self._fixed_port else 3):
            self.port = self._fixed_port or free_port()
            data_dir = self.workdir / f"data-{self.port}"
            data_dir.mkdir(parents=True, exist_ok=True)
            config = self.workdir / f"zoo-{self.port}.cfg"
            config.write_text(
                "\n".join(
                    [
                        "tickTime=500",
                        "initLimit=10",
                        "syncLimit=5",
                        f"dataDir={data_dir}",
                        f"clientPort={self.port}",
                        "clientPortAddress=127.0.0.1",
                        "maxClientCnxns=0",  # tests open many sessions from one address
                        "maxSessionTimeout=60000",
                        "admin.enableServer=false",  # its Jetty would take port 8080
                        "4lw.commands.whitelist=ruok,srvr,stat",
                        "forceSync=no",  # test data need not survive a power cut
                        "",
                    ]
                )
            )
            log = self.log_path.open("ab")
            self._proc = subprocess.Popen(
                [
                    java,
                    "-Xmx256m",
                    "-Dzookeeper.log.dir=" + str(self.workdir),
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-cp",
                    classpath,
                    _MAIN,
                    str(config),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                # Its own session: a terminal's Ctrl-C (sent to the foreground process
                # group) must not kill it under the bookies that still use it; whoever
                # started it stops it, last (embedlog/sandbox.py).
                start_new_session=True,
            )
            log.close()
            deadline = time.monotonic() + _START_TIMEOUT
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    last_error = f"exited with status {self._proc.returncode}"
                    break
                if self.serving():
                    return
                time.sleep(0.1)
            else:
                last_error = f"did not answer ruok within {_START_TIMEOUT:g}s"
                self.stop()
                break
        raise RuntimeError(
            f"ZooKeeper server {last_error}; log {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def running_zookeeper() -> Iterator[ZooKeeperServer]:
    """A started server in a temporary directory, stopped and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="embedlog-zk-") as tmp:
        server = ZooKeeperServer(Path(tmp))
        try:
            server.start()
            yield server
        finally:
            server.stop()


__all__ = [
    "INSTALL_HINT",
    "ZooKeeperNotInstalled",
    "ZooKeeperServer",
    "find_classpath",
    "find_java",
    "four_letter",
    "free_port",
    "running_zookeeper",
]
