"""A booted copy's cookies point at the copy; whatever else they say is kept."""

from __future__ import annotations

import json

from embedlog.snapshot import relocate_cookie


def _cookie(dirs: list[str], address: str = "inprocess:bookie-1") -> bytes:
    doc = {"bookie_id": "bookie-1", "address": address, "directories": dirs, "instance_id": "i"}
    return json.dumps(doc).encode()


def test_directories_under_the_root_move_others_stay() -> None:
    data = _cookie(["/d/c/bookie-1/journal", "/elsewhere/index", "/d/cx/bookie-1/ledgers"])
    moved = json.loads(relocate_cookie(data, "/d/c", "/tmp/copy"))
    assert moved["directories"] == [
        "/tmp/copy/bookie-1/journal",
        "/elsewhere/index",  # not under the root: a wrong cookie stays wrong
        "/d/cx/bookie-1/ledgers",  # a sibling whose name starts alike is not under it
    ]
    assert moved["address"] == "inprocess:bookie-1" and moved["instance_id"] == "i"


def test_an_unreadable_cookie_is_left_as_it_is() -> None:
    assert relocate_cookie(b"\x00garbage", "/d", "/t") == b"\x00garbage"
