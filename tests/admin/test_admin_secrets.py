"""Admin output never shows a ledger's password or the master key derived from it.

``embedlog ledger show`` printed the password in base64; the master key (hex) is all a
client needs to write to, fence or delete the ledger on its bookies.
"""

from __future__ import annotations

import base64
import json

from embedlog.cli import main
from embedlog.wire.entry import DigestType, master_key

PASSWORDS = [b"s3cret-pw", b"\x00\xffbinary", b""]


def secret_forms(password: bytes) -> list[str]:
    """Every way the password or its master key could be spelled in text output."""
    key = master_key(password)
    forms = [key.hex(), key.hex().upper(), base64.b64encode(key).decode()]
    if password:
        forms += [password.hex(), base64.b64encode(password).decode(), repr(password)]
        forms += [password.decode("latin-1")] if password.isascii() else []
    return forms


def test_no_admin_command_prints_a_password_or_master_key(make_cluster, capsys):
    cluster = make_cluster(3)
    client = cluster.client()
    ids = []
    for pw in PASSWORDS:
        wh = client.create_ledger(3, 3, 2, digest=DigestType.MAC, password=pw)
        wh.add(b"entry")
        wh.close()
        ids.append(wh.ledger_id)
    ul = client.create_unbounded(3, 3, 2, password=b"stream-pw", digest=DigestType.MAC)
    ul.append(b"entry")
    ul.close()
    for lid in ids:  # not in a repr either (logs, test reports)
        assert not any(f in repr(client.ledger_metadata(lid)) for f in secret_forms(PASSWORDS[0]))
    data_dir = str(cluster.data_dir)
    cluster.stop()  # the embedded store is for one process at a time

    common = ["--data-dir", data_dir]
    outputs = []
    for lid in [*ids, ul.ledger_id]:
        assert main(["ledger", "show", *common, str(lid)]) == 0
        out = capsys.readouterr()
        doc = json.loads(out.out)
        assert doc["ledger_id"] == lid and doc["digest_type"] == DigestType.MAC.value
        assert doc["password"] == "<hidden>" and doc["password_hash"] == "<hidden>"
        outputs.append(out.out + out.err)
    for argv in (
        ["ledger", "list", *common],
        ["bookie", "list", *common],
        ["bookie", "status", "--json", *common],
        ["auditor", "check", "--json", "--recheck-delay", "0", *common],
        ["auditor", "check", "--recheck-delay", "0", *common],
    ):
        assert main(argv) == 0, argv
        out = capsys.readouterr()
        outputs.append(out.out + out.err)
    text = "\n".join(outputs)
    assert str(ids[0]) in text  # the commands did print about these ledgers
    for pw in [*PASSWORDS, b"stream-pw"]:
        for form in secret_forms(pw):
            assert form not in text, f"admin output shows {form!r} (password {pw!r})"
