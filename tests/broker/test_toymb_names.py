"""ToyMB's configuration names, as its users pass them: dotted environment variables (its compose
file), Spring's relaxed forms, and its JDBC datasource keys, in the environment or the file."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from broker.config import load
from broker.errors import ConfigError
from tests.support import free_port, wait_until

COMPOSE_ENV = {"node.name": "toymb-7", "server.port": "9123", "topics": "orders,audit", "peers": "http://10.0.0.2:8080",
               "enrichingtopics": "orders=pkg.mod:Enricher"}


def test_toymb_compose_variables_and_their_relaxed_forms_are_read() -> None:
    s = load(env=COMPOSE_ENV)
    assert (s.node_name, s.port, s.topics, s.peers) == ("toymb-7", 9123, ("orders", "audit"),
                                                        ("http://10.0.0.2:8080",))
    assert s.enriching_topics == ("orders=pkg.mod:Enricher",)
    relaxed = load(env={"NODE_NAME": "toymb-8", "SERVER_PORT": "9124", "TOPICS": "x", "PEERS": "http://p:1",
                        "ENRICHINGTOPICS": "x=m:C"})
    assert (relaxed.node_name, relaxed.port, relaxed.topics, relaxed.enriching_topics) == (
        "toymb-8", 9124, ("x",), ("x=m:C",))
    # The dotted form wins over the relaxed one, and TOYMB_* over both.
    assert load(env={"node.name": "dotted", "NODE_NAME": "relaxed"}).node_name == "dotted"
    assert load(env={"node.name": "dotted", "TOYMB_NODE_NAME": "ours"}).node_name == "ours"
    # Validation is unchanged: a bad port in ToyMB's name is as clear an error as in ours.
    with pytest.raises(ConfigError, match="server.port"):
        load(env={"server.port": "eighty"})


@pytest.mark.parametrize(("keys", "url"), [
    ({"spring.datasource.url": "jdbc:postgresql://db:5432/toymb", "spring.datasource.username": "mb",
      "spring.datasource.password": "p@ss word", "spring.datasource.driver-class-name": "org.postgresql.Driver"},
     "postgresql://mb:p%40ss%20word@db:5432/toymb"),
    ({"spring.datasource.url": "jdbc:postgresql://db/toymb?user=u&password=pw&ssl=false"}, "postgresql://u:pw@db/toymb"),
    ({"SPRING_DATASOURCE_URL": "jdbc:postgresql://db:5432/toymb", "SPRING_DATASOURCE_USERNAME": "mb"},
     "postgresql://mb@db:5432/toymb"),
    ({"spring.datasource.url": "jdbc:postgresql://db:5432/toymb", "TOYMB_DATABASE_URL": "sqlite:///mine.db"},
     "sqlite:///mine.db"),
    ({"spring.datasource.url": "jdbc:mysql://mysql:3306/toymb?useSSL=false&serverTimezone=UTC",
      "spring.datasource.username": "root", "spring.datasource.password": "secret",
      "spring.datasource.driver-class-name": "com.mysql.cj.jdbc.Driver"}, "mysql://root:secret@mysql:3306/toymb"),
    ({"spring.datasource.url": "jdbc:mariadb://db/toymb", "spring.datasource.username": "mb"},
     "mariadb://mb@db/toymb"),
])
def test_jdbc_urls_become_store_urls(keys: dict[str, str], url: str) -> None:
    assert load(env=keys).database_url == url


@pytest.mark.parametrize(("keys", "fragment"), [
    ({"spring.datasource.url": "jdbc:h2:mem:toymb"}, "SQLite is the embedded default"),
    ({"spring.datasource.url": "jdbc:oracle:thin:@db:1521:x"}, "unsupported JDBC URL"),
    ({"spring.datasource.url": "postgresql://db/toymb"}, "must be a JDBC URL"),
    ({"spring.datasource.url": "jdbc:postgresql://"}, "names no host and database"),
    ({"spring.datasource.username": "mb"}, "without spring.datasource.url"),
    ({"spring.datasource.url": "jdbc:postgresql://db/toymb", "spring.datasource.driver-class-name": "org.h2.Driver"},
     "does not speak"),
])
def test_datasource_mistakes_stop_startup_with_a_clear_message(keys: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load(env=keys)


def test_spring_keys_in_the_properties_file_and_jpa_accepted_with_one_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    props = tmp_path / "application.properties"
    props.write_text("node.name=from-file\nspring.datasource.url=jdbc:postgresql://db/toymb\n"
                     "spring.datasource.username=mb\nspring.jpa.hibernate.ddl-auto=update\n"
                     "spring.jpa.show-sql=true\n")
    with caplog.at_level(logging.WARNING, logger="broker.toymb_names"):
        s = load(props, env={"SPRING_JPA_OPEN_IN_VIEW": "false"})
    assert (s.node_name, s.database_url) == ("from-file", "postgresql://mb@db/toymb")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "spring.jpa.hibernate.ddl-auto" in warnings[0]
    assert "spring.jpa.open.in.view" in warnings[0], "the relaxed form from the environment is named too"


@pytest.fixture(params=["postgresql", "mariadb"])
def toymb_style_node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """A node started only with ToyMB's compose-file variables: a jdbc:postgresql:// URL at the test
    PostgreSQL, or a jdbc:mysql:// URL (ToyMB's own compose file) at the test MariaDB."""
    store_url = str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "mariadb_url"))
    port = free_port()
    parts = urlsplit(store_url.split("+", 1)[0] + "://" + store_url.split("://", 1)[1])
    jdbc = "jdbc:postgresql" if request.param == "postgresql" else "jdbc:mysql"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    env.update({"node.name": "toymb-legacy", "server.port": str(port), "topics": "orders",
                "spring.datasource.url": f"{jdbc}://{parts.hostname}:{parts.port}{parts.path}?useSSL=false",
                "spring.datasource.username": parts.username or "",
                "spring.datasource.driver-class-name": "org.postgresql.Driver" if request.param == "postgresql"
                else "com.mysql.cj.jdbc.Driver",
                "spring.jpa.hibernate.ddl-auto": "update", "TOYMB_DATA_DIR": str(tmp_path)})
    log = open(tmp_path / "node.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "broker", "serve"], env=env, cwd=tmp_path, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", store_url, str(tmp_path / "node.log")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_a_node_started_with_toymbs_compose_variables_uses_that_name_port_and_database(
        toymb_style_node: tuple[str, str, str]) -> None:
    url, store_url, log = toymb_style_node

    def up() -> bool:
        try:
            return requests.get(f"{url}/actuator/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(up, timeout=60, what="the node on its ToyMB port")
    except AssertionError as exc:   # the node's log as it is then, not as it was before the wait
        raise AssertionError(f"{exc}; log:\n{Path(log).read_text()[-2000:]}") from None
    assert requests.get(f"{url}/actuator/health", timeout=5).json() == {"status": "UP"}
    assert requests.get(f"{url}/health", timeout=5).json()["node"] == "toymb-legacy"
    assert requests.post(f"{url}/sendmessage", json={"id": "legacy-1", "topicName": "orders", "key": "k",
                                                     "body": "hello", "requestor": None}, timeout=10).text == "ack"
    from broker.store import Store

    store = Store(store_url)
    try:
        assert store.count_messages("orders") == 1, "the message is in the database the JDBC URL named"
    finally:
        store.dispose()
