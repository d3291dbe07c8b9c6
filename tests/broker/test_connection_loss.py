"""The database drops a node's connections (a server restart, a failover, an idle-connection
reaper): publishers get 503s to retry, never a 500, and the next publishes are stored.

The server kills every backend of the node's database with ``pg_terminate_backend`` (on
MariaDB, ``KILL``): what a restart does to a client, without restarting the shared server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from broker.app import create_app
from broker.store.sql import normalize_url
from tests.support import stored_messages


def _kill_connections(url: str) -> int:
    """Kill every other session on ``url``'s database; how many were killed."""
    engine = create_engine(normalize_url(url), isolation_level="AUTOCOMMIT")
    database = make_url(normalize_url(url)).database
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                return len(conn.execute(text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": database}).all())
            ids = [r[0] for r in conn.execute(text(
                "SELECT id FROM information_schema.processlist WHERE db = :d AND id <> CONNECTION_ID()"),
                {"d": database})]
            for session in ids:
                conn.execute(text(f"KILL {int(session)}"))
            return len(ids)
    finally:
        engine.dispose()


@pytest.fixture(params=["postgresql", "mariadb"])
def server_app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    url = str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "mariadb_url"))
    app = create_app({"data_dir": str(tmp_path_factory.mktemp("loss")), "database_url": url})
    yield app
    app.extensions["toymb"].stop()


def test_publishes_recover_after_the_server_drops_every_connection(server_app: Flask) -> None:
    client: FlaskClient = server_app.test_client()
    url = str(server_app.extensions["toymb"].settings.effective_database_url)
    acked: list[str] = []
    for round_ in range(3):
        for i in range(20):
            answer = client.post("/v1/topics/loss/messages", json={"id": f"r{round_}-{i}", "body": i})
            assert answer.status_code in (200, 201, 503), answer.get_json()
            if answer.status_code == 503:
                assert answer.headers["Retry-After"]
                answer = client.post("/v1/topics/loss/messages", json={"id": f"r{round_}-{i}", "body": i})
            assert answer.status_code in (200, 201), answer.get_json()  # a retry is stored
            acked.append(f"r{round_}-{i}")
        assert _kill_connections(url) >= 1
    ids = sorted(row.id for row in stored_messages(server_app.extensions["toymb"].store, "loss"))
    assert ids == sorted(acked)
