"""The client a bookie's BP-46 repair uses: a Client seen as embedlog/bookie/repair.py's
``RepairClient``.

The bookie sits below the client in the layers (pyproject.toml, [tool.importlinter]):
it asks for a ``RepairClient`` and whoever starts bookies (LocalCluster's bookies, the
bookie process, the simulator) gives it one made here of a Client of its peers.
"""

from __future__ import annotations

from collections.abc import Callable

from embedlog.bookie.repair import ClientFactory
from embedlog.client import Client
from embedlog.unbounded.takeover import TermStart, take_over
from embedlog.wire.messages import OpCode, Response


class ClientForRepair:
    """``RepairClient`` over a Client: recovery, a stream's takeover, a peer's entry."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def recover(self, ledger_id: int, password: bytes) -> None:
        await self.client.open_ledger_aio(ledger_id, password=password, recover=True)

    async def take_over(self, ledger_id: int, password: bytes) -> TermStart:
        return await take_over(self.client.ctx, ledger_id, password)

    async def read(self, bookie: str, ledger_id: int, entry_id: int) -> Response:
        return await self.client.ctx.bookies.call(bookie, OpCode.READ, ledger_id, entry_id)


def repair_clients(make: Callable[[], Client]) -> ClientFactory:
    """The ``client_factory`` a Bookie takes, of a factory of Clients."""
    return lambda: ClientForRepair(make())
