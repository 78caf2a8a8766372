"""(being written)"""

from __future__ import annotations

from gateway.remoting.dispatch import DispatchTable


def register(table: DispatchTable) -> None:
    pass
