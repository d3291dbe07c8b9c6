"""Fixtures every test folder may use."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text

from broker.app import create_app
from broker.store import Store
from broker.store.sql import normalize_url
from journal_spark.jvm_archive import archive_path, java_options
from tests.delivery.support import Receiver
from tests.scheduling import expected_seconds
from tests.support import ROOT, NodeProcess, need_service, own_database, worker_name

# The JVMs the tests start (Spark's above all) live for seconds, not hours: C1 alone and the serial
# collector spend about 30% less CPU on a start than the default tiered C2 and G1, and CPU is what a
# parallel run on 2 cores is short of. `make test` also builds a class-data-sharing archive of the
# journal's JVM first (journal_spark/jvm_archive.py), which halves a Spark start's CPU again. Both
# change how fast Java starts and runs, never what it does. (Spark's rare
# java.io.OptionalDataException in a fresh job's first tasks was seen with and without C1.)
JVM_ARCHIVE = archive_path(Path(os.environ.get("TOYMB_SERVICES_DIR", ROOT / ".services")))
os.environ.setdefault("JDK_JAVA_OPTIONS", java_options(JVM_ARCHIVE))


@pytest.fixture(scope="session", autouse=True)
def _spark_scratch_in_pytest_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Spark's scratch folders (a copy of the jars each, about 28 MB) go under pytest's temp folder,
    which pytest prunes: the crash tests' SIGKILLed drivers never delete their /tmp/spark-*, and
    1,200 of those once filled this machine's disk. Journal processes and Spark workers that the
    tests start inherit the variable."""
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(tmp_path_factory.mktemp("spark-local")))


# The server's database (created by services/postgres.sh); each xdist worker works in its own copy.
SERVER_PG_URL = os.environ.get("TOYMB_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:15432/toymb_test")
PG_URL = SERVER_PG_URL


def _worker_database(server_url: str) -> str | None:
    """This xdist worker's own database on the server of ``server_url``, or None when it cannot be reached."""
    try:
        url = own_database(server_url, worker_name("toymb_test"))
        engine = create_engine(normalize_url(url), connect_args={"connect_timeout": 2})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        return url
    except Exception:  # noqa: BLE001
        return None


def _pg_available() -> bool:
    global PG_URL
    url = _worker_database(SERVER_PG_URL)
    PG_URL = url or PG_URL
    return url is not None


@pytest.fixture(scope="session")
def pg_available() -> bool:
    return _pg_available()


def reset_pg(url: str) -> None:
    """Drop every toymb table, so a test starts from an empty database (PostgreSQL or MariaDB)."""
    store = Store(url)
    store.drop_schema()
    store.dispose()


@pytest.fixture
def pg_url(pg_available: bool) -> str:
    need_service(pg_available, "PostgreSQL (services/postgres.sh)")
    reset_pg(PG_URL)
    return PG_URL


# The MariaDB server's database (created by services/mariadb.sh); each xdist worker works in its own.
SERVER_MARIADB_URL = os.environ.get("TOYMB_TEST_MARIADB_URL", "mysql+pymysql://toymb@127.0.0.1:13306/toymb_test")
MARIADB_URL = SERVER_MARIADB_URL


def _mariadb_available() -> bool:
    global MARIADB_URL
    url = _worker_database(SERVER_MARIADB_URL)
    MARIADB_URL = url or MARIADB_URL
    return url is not None


@pytest.fixture(scope="session")
def mariadb_available() -> bool:
    return _mariadb_available()


@pytest.fixture
def mariadb_url(mariadb_available: bool) -> str:
    """This xdist worker's own MariaDB database, emptied."""
    need_service(mariadb_available, "MariaDB (services/mariadb.sh)")
    reset_pg(MARIADB_URL)
    return MARIADB_URL


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using this runs once on SQLite, once on PostgreSQL and once on MariaDB."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'toymb.db'}"
    if request.param == "mariadb":
        return str(request.getfixturevalue("mariadb_url"))
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    """An in-process node on SQLite, started (writer and services running)."""
    application = create_app({"data_dir": str(tmp_path), "push_allow": ("127.0.0.0/8", "localhost")})
    yield application
    application.extensions["toymb"].stop()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def node_process(tmp_path: Path) -> Iterator[NodeProcess]:
    """A real ``toymb serve`` process on SQLite; stopped after the test."""
    node = NodeProcess(tmp_path / "node").start()
    yield node
    node.stop()


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a module-scoped fixture of this suite (a node, a cluster, a browser...)."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(
        defs[-1].scope == "module" and defs[-1].baseid.startswith("tests")
        for defs in info.name2fixturedefs.values())


# First: xdist's worker plugin reads the ``xdist_group`` marks in its own hook (it appends the group to
# each node id), and it runs before a conftest's unless told otherwise, so marks added later were
# ignored (the "spark" group never held: each worker started its own SparkSession).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order and group the suite for ``pytest -n`` (pytest-xdist, ``--dist loadgroup``).

    A module whose tests share a module-scoped fixture runs on one worker: under ``loadgroup``
    every other test is a unit of its own, so the module's tests went to every worker, and each
    worker set the fixture up again (the console's three-node cluster and browser up to 4 times).

    Longest work first: each test (or ``xdist_group``, which one worker runs as a whole) is ranked
    by its expected seconds (``tests.scheduling.LONG_POLES_S``, a group by the sum of its tests), so
    the long poles start at once and the run ends on short tests spread over every worker, not on a
    4-minute test that started late. xdist hands out work in this order (a group where its first
    test is) when given ``--no-loadscope-reorder`` (the Makefile's PYTEST_ARGS); by default it
    would put every group first, by its number of tests.
    The tests on the in-process SparkSession share one worker, so only one such JVM is started.
    """
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif item.get_closest_marker("xdist_group") is None and _shares_a_module_fixture(item):
            module = item.nodeid.split("::", 1)[0].removeprefix("tests/").removesuffix(".py")
            item.add_marker(pytest.mark.xdist_group(module))

    expected = expected_seconds((item.nodeid for item in items),
                                slow=(item.nodeid for item in items if item.get_closest_marker("slow")))
    unit_s: dict[str, float] = {}
    for item in items:
        unit = _group(item) or item.nodeid
        unit_s[unit] = unit_s.get(unit, 0.0) + expected[item.nodeid]
    # Stable sort: equal estimates keep the collection order (fast tests stay by module).
    items.sort(key=lambda item: -unit_s[_group(item) or item.nodeid])


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    """Push receivers made by a test (``tests.delivery.support.Receiver``); all closed after it."""
    made: list[Receiver] = []
    yield made
    for receiver in made:
        try:
            receiver.stop()
        except OSError:
            pass
