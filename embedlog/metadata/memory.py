"""An in-memory MetadataStore: for unit tests and throwaway clusters."""

from __future__ import annotations

import threading

from embedlog.metadata.store import (
    ANY_VERSION,
    MetadataStore,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
)


def normalize(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"metadata paths are absolute: {path!r}")
    return path.rstrip("/") or "/"


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class MemoryMetadataStore(MetadataStore):
    def __init__(self) -> None:
        self._nodes: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        return self._create(normalize(path), data, None)

    def create_if(self, path: str, data: bytes, exists: str) -> int:
        return self._create(normalize(path), data, normalize(exists))

    def _create(self, path: str, data: bytes, exists: str | None) -> int:
        with self._lock:
            if exists is not None and exists not in self._nodes:
                raise NoNodeError(f"{exists} does not exist: {path} was not created")
            if path in self._nodes:
                raise NodeExistsError(f"{path} exists")
            self._nodes[path] = (bytes(data), 0)
        return 0

    def get(self, path: str) -> tuple[bytes, int]:
        path = normalize(path)
        with self._lock:
            try:
                return self._nodes[path]
            except KeyError:
                raise NoNodeError(f"{path} does not exist") from None

    def set(self, path: str, data: bytes, version: int) -> int:
        path = normalize(path)
        with self._lock:
            if path not in self._nodes:
                raise NoNodeError(f"{path} does not exist")
            current = self._nodes[path][1]
            if version != ANY_VERSION and version != current:
                raise MetadataVersionError(f"{path}: version {version} != {current}")
            self._nodes[path] = (bytes(data), current + 1)
            return current + 1

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        path = normalize(path)
        with self._lock:
            if path not in self._nodes:
                raise NoNodeError(f"{path} does not exist")
            current = self._nodes[path][1]
            if version != ANY_VERSION and version != current:
                raise MetadataVersionError(f"{path}: version {version} != {current}")
            prefix = path + "/"
            for p in [p for p in self._nodes if p.startswith(prefix)]:
                del self._nodes[p]
            del self._nodes[path]

    def sync(self, path: str) -> None:
        """Reads are served by this process from the store itself: never behind."""

    def held_by_another_session(self, path: str) -> bool:
        return self.exists(path)  # the store itself has no session: every node is another's

    def children(self, path: str) -> list[str]:
        path = normalize(path)
        prefix = "/" if path == "/" else path + "/"
        with self._lock:
            names = {p[len(prefix) :].split("/", 1)[0] for p in self._nodes if p.startswith(prefix)}
        return sorted(names)
