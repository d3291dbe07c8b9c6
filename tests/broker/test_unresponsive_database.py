"""A PostgreSQL server that accepts the connection and never answers ends in an error, not a hang.

libpq waits for ever by default while it connects. A node on such a database (or on an address
whose host went away with its container) would hold publishes past their clients' timeouts instead
of answering 503; the store connects with a bounded wait (``dialects.PG_CONNECT_TIMEOUT_S``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from broker.store.dialects import PG_CONNECT_TIMEOUT_S, engine_options
from broker.store.engines import open_engine


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(timeout=5)
    for conn in accepted:
        conn.close()
    listener.close()


def _connect_and_query(url: str, outcome: list[BaseException | None]) -> None:
    engine = open_engine(url, pooled=True)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        outcome.append(None)
    except BaseException as exc:  # noqa: BLE001 - handed to the test
        outcome.append(exc)
    finally:
        engine.dispose()


def test_a_postgresql_server_that_never_answers_is_an_error_not_a_hang(silent_server: int) -> None:
    outcome: list[BaseException | None] = []
    worker = threading.Thread(target=_connect_and_query, daemon=True,
                              args=(f"postgresql+psycopg://toymb@127.0.0.1:{silent_server}/toymb", outcome))
    worker.start()
    worker.join(timeout=60)   # far past the bound: only a connect that waits for ever is still here
    assert not worker.is_alive(), "connecting to a silent server never ended"
    assert len(outcome) == 1 and isinstance(outcome[0], OperationalError), outcome


def test_a_connect_timeout_in_the_url_wins_and_only_there() -> None:
    assert engine_options("postgresql+psycopg://toymb@127.0.0.1:5432/toymb?connect_timeout=30") == {}
    # A password that happens to hold the words is no setting: the bound still applies.
    assert engine_options("postgresql+psycopg://toymb:connect_timeout=9@127.0.0.1:5432/toymb") == {
        "connect_args": {"connect_timeout": PG_CONNECT_TIMEOUT_S}}
