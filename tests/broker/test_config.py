"""Configuration: layered, validated, with clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import load
from broker.errors import ConfigError
from broker.store import normalize_url


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    props = tmp_path / "node.properties"
    props.write_text("# ToyMB's names\nnode.name=from-file\nserver.port=9001\ntopics=a,b\n"
                     "datasource.url=sqlite:///x.db\nenrichingtopics=orders=pkg.mod:Cls\n")
    s = load(props, env={})
    assert (s.node_name, s.port, s.topics, s.database_url) == ("from-file", 9001, ("a", "b"), "sqlite:///x.db")
    assert s.enriching_topics == ("orders=pkg.mod:Cls",) and s.max_body == 1 << 20
    s = load(props, env={"TOYMB_PORT": "9002"})
    assert s.port == 9002 and s.node_name == "from-file"
    s = load(props, env={"TOYMB_PORT": "9002"}, overrides={"port": 9003})
    assert s.port == 9003


def test_nothing_set_means_sqlite_under_data() -> None:
    s = load(env={})
    assert s.effective_database_url.endswith("/data/toymb.db") and s.effective_database_url.startswith("sqlite")
    assert (s.host, s.port, s.default_partitions) == ("127.0.0.1", 8080, 100)


@pytest.mark.parametrize(("text", "env", "fragment"), [
    ("node.nmae=x\n", {}, "unknown key 'node.nmae'"),
    ("server.port=eighty\n", {}, "bad value 'eighty'"),
    ("", {"TOYMB_PROT": "1"}, "unknown environment variable TOYMB_PROT"),
    ("", {"TOYMB_PORT": "70000"}, "not a TCP port"),
    ("", {"TOYMB_DEFAULT_PARTITIONS": "0"}, "must be positive"),
    ("", {"TOYMB_FETCH_MAX_BYTES": "0"}, "must be positive"),
    ("", {"TOYMB_PUSH_IN_FLIGHT": "0"}, "must be positive"),
    ("fetch.max.bytes=4MB\n", {}, "bad value '4MB' for fetch_max_bytes"),
    ("", {"TOYMB_DATABASE_URL": "oracle://x"}, "sqlite://, postgresql:// or mysql://"),
    ("just a line\n", {}, "expected key=value"),
])
def test_bad_settings_are_clear_errors(tmp_path: Path, text: str, env: dict[str, str], fragment: str) -> None:
    props = tmp_path / "p.properties"
    props.write_text(text)
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        load(props, env=env)


def test_serve_with_a_bad_setting_exits_with_a_message_not_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "broker", "serve", "--port", "1"],
                            env={"TOYMB_MAX_BODY": "-5", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    assert "max_body" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("given", "opened"), [
    ("mysql://toymb@db:3306/toymb", "mysql+pymysql://toymb@db:3306/toymb"),
    ("mariadb://toymb:secret@db/toymb", "mariadb+pymysql://toymb:secret@db/toymb"),
    ("postgresql://u@db/toymb", "postgresql+psycopg://u@db/toymb"),
    ("mysql+pymysql://toymb@db/toymb", "mysql+pymysql://toymb@db/toymb"),
])
def test_a_mariadb_or_postgresql_url_is_accepted_and_opened_with_the_installed_driver(given: str, opened: str) -> None:
    settings = load(env={"TOYMB_DATABASE_URL": given})
    assert normalize_url(settings.effective_database_url) == opened


def test_the_journal_images_jar_variables_do_not_stop_a_node_or_the_journal() -> None:
    """The journal's Docker image sets TOYMB_DELTA_JARS; the settings of the same process must accept it
    (CI: the journal container restarted on "unknown environment variable TOYMB_DELTA_JARS")."""
    from broker.config import load

    settings = load(env={"TOYMB_DELTA_JARS": "/opt/delta-jars", "TOYMB_DELTA_VERSION": "4.4.0", "TOYMB_PORT": "8181"})
    assert settings.port == 8181
