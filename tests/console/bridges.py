"""A real bridge management server (``journal_spark.jms.manage``) over bridges that only keep their state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from journal_spark.jms.manage import ManagementServer
from journal_spark.metrics import JournalMetrics


class StateOnlyBridge:
    """The state machine of a JMS ingress (STARTED, PAUSED, STOPPED), without a JMS connection."""

    def __init__(self, name: str) -> None:
        self.name, self.state = name, "STARTED"

    def start(self) -> None:
        self.state = "STARTED"

    def stop(self) -> None:
        self.state = "STOPPED"

    def pause(self) -> None:
        self.state = "PAUSED"

    def resume(self) -> None:
        self.state = "STARTED"

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "jms-ingress", "state": self.state, "message_count": 3,
                "last_error": None, "parameters": {"x": "y"}}


@contextmanager
def management_server(*names: str) -> Iterator[tuple[str, dict[str, StateOnlyBridge]]]:
    """The management API of bridges ``names`` on a loopback port: (its URL, the bridges)."""
    bridges = {n: StateOnlyBridge(n) for n in names}
    server = ManagementServer(bridges, JournalMetrics().registry).start()  # type: ignore[arg-type]
    try:
        yield f"http://127.0.0.1:{server.port}", bridges
    finally:
        server.close()
