"""What differs between the SQL databases the store runs on (SQLite, PostgreSQL, MariaDB/MySQL), in one place.

Everything else in ``broker/store`` writes one statement for all of them. That holds because:

- raw SQL quotes identifiers with double quotes (``"partition"``, ``"offset"``, ``"key"``), and
  a MariaDB connection runs with ``ANSI_QUOTES`` in its ``sql_mode`` (:func:`engine_options`);
- every database runs at READ COMMITTED (PostgreSQL's default; SQLite has one writer): after the
  writer locks a topic's row, its next statements see what the previous owner committed;
- the few statements that cannot be shared are here: the clock, the schema creation lock, the
  topic row lock with its timeouts, and the journal's upsert.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from sqlalchemy import Connection, Row, Table, case, text
from sqlalchemy.engine import make_url
from sqlalchemy.sql.dml import Insert

MYSQL = ("mysql", "mariadb")

# The PostgreSQL advisory lock that serialises schema creation (any constant: "toymb" in ASCII);
# on MariaDB a named lock, followed by the database's name (its named locks are server-wide, and
# the databases of other brokers, or of other test workers, need not wait for this one).
_SCHEMA_LOCK_KEY = 0x746F796D62
_SCHEMA_LOCK_NAME = "toymb_schema."
_SCHEMA_LOCK_WAIT_S = 60

# ANSI_QUOTES: "partition" is an identifier, as everywhere else. STRICT_TRANS_TABLES: a value too
# long for its column is an error (400), never silently cut, even on a server configured without it.
_MYSQL_INIT = ("SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), "
               "'ANSI_QUOTES', 'STRICT_TRANS_TABLES')")

_NOW_SQL = {
    "postgresql": "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint",
    "sqlite": "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    # SYSDATE, not NOW: the time the statement runs, as clock_timestamp() (NOW is fixed per statement
    # anyway; SYSDATE also ignores a session's SET TIMESTAMP).
    "mysql": "SELECT CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)",
    "mariadb": "SELECT CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)",
}


def is_mysql(dialect_name: str) -> bool:
    """True for MariaDB and MySQL (SQLAlchemy names the dialect ``mariadb`` for ``mariadb://`` URLs)."""
    return dialect_name in MYSQL


def normalize_url(url: str) -> str:
    """Name the drivers this project installs: psycopg 3 for PostgreSQL, PyMySQL for MariaDB/MySQL."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    driver = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg",
              "mysql": "mysql+pymysql", "mariadb": "mariadb+pymysql"}.get(scheme)
    return f"{driver}://{rest}" if driver else url


# libpq waits for ever by default while it connects (a server that accepts and says nothing, an
# address whose host is gone): a node would hold publishes past their clients' timeouts instead of
# answering 503. 2 s is libpq's minimum; a URL's own ``connect_timeout`` wins.
PG_CONNECT_TIMEOUT_S = 2


def engine_options(url: str) -> dict[str, Any]:
    """Extra ``create_engine`` arguments for the database of ``url`` (already normalised)."""
    if url.startswith("postgresql"):
        # The URL's query, not its text: a password may hold "connect_timeout=".
        if "connect_timeout" in make_url(url).query:
            return {}
        return {"connect_args": {"connect_timeout": PG_CONNECT_TIMEOUT_S}}
    if not url.startswith(MYSQL):
        return {}
    # utf8mb4: four-byte UTF-8 (emoji) in headers and keys; MariaDB's "utf8" stops at three bytes.
    return {"isolation_level": "READ COMMITTED",
            "connect_args": {"charset": "utf8mb4", "init_command": _MYSQL_INIT},
            # The server closes connections idle for wait_timeout (8 h by default); pre-ping would
            # notice, recycling avoids the failed ping.
            "pool_recycle": 3600}


def now_sql(dialect_name: str) -> str | None:
    """The statement that reads the database server's clock in ms since the epoch, if it has one."""
    return _NOW_SQL.get(dialect_name)


@contextmanager
def schema_lock(conn: Connection) -> Iterator[None]:
    """Hold the database-wide lock of schema creation while the block runs (inside ``conn``'s transaction).

    Nodes of a cluster start together; without the lock two of them both see a table missing and
    the second CREATE fails. PostgreSQL's DDL is transactional, so its lock holds until the
    tables are committed; MariaDB commits each DDL statement at once, so its named lock is simply
    held until the block ends. SQLite's write transaction is the lock.
    """
    name = conn.dialect.name
    if name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
        yield
        return
    if not is_mysql(name):
        yield
        return
    # At most 64 characters, as MariaDB wants lock names.
    lock = conn.execute(text("SELECT LEFT(CONCAT(:name, DATABASE()), 64)"), {"name": _SCHEMA_LOCK_NAME}).scalar()
    got = conn.execute(text("SELECT GET_LOCK(:lock, :wait)"), {"lock": lock, "wait": _SCHEMA_LOCK_WAIT_S}).scalar()
    if got != 1:
        raise TimeoutError(f"another process held the schema lock {lock} for {_SCHEMA_LOCK_WAIT_S}s")
    try:
        yield
    finally:
        conn.execute(text("SELECT RELEASE_LOCK(:lock)"), {"lock": lock})


class TopicRow(NamedTuple):
    """A ``toymb_topics`` row as :func:`lock_topic_rows` reads it."""

    name: str
    owner: str | None
    epoch: int | None


def lock_topic_rows(conn: Connection, names: Sequence[str], lock_timeout_ms: int) -> dict[str, Row[Any] | TopicRow]:
    """Lock the rows of ``toymb_topics`` named ``names`` until commit, in name order, in one
    statement; their ``name, owner, epoch`` by name (a name without a row is left out).

    Where the database allows it, the lock wait, and a transaction that holds the locks and then
    goes idle (its node frozen), end after ``lock_timeout_ms``: a frozen node must not hold a
    topic past its lease. Run by every commit of the writer, so it is one plain statement (no trip
    through SQLAlchemy's compile cache), and on PostgreSQL the transaction-local timeouts are set
    by the same statement: ``set_config`` in a one-row subquery of the join, which is evaluated
    before the first row is locked (a volatile function's subquery is never pulled up).
    """
    ordered = sorted(set(names))
    name = conn.dialect.name
    if name == "postgresql":
        timeout = f"{lock_timeout_ms}ms"
        rows = conn.exec_driver_sql(
            "SELECT t.name, t.owner, t.epoch FROM toymb_topics AS t, "
            "(SELECT set_config('lock_timeout', %s, true) AS a, "
            "set_config('idle_in_transaction_session_timeout', %s, true) AS b) AS timeouts "
            "WHERE t.name = ANY(%s) ORDER BY t.name FOR UPDATE OF t", (timeout, timeout, ordered))
    elif is_mysql(name):
        _mysql_lock_timeouts(conn, lock_timeout_ms)
        marks = ", ".join(["%s"] * len(ordered))
        rows = conn.exec_driver_sql(
            f"SELECT name, owner, epoch FROM toymb_topics WHERE name IN ({marks}) ORDER BY name FOR UPDATE",
            tuple(ordered))
    else:
        # SQLite has no FOR UPDATE: the write transaction is the lock. Straight to the DBAPI
        # cursor, as the writer's inserts: SQLAlchemy's result object (column metadata, row
        # processors) for this one-row select was a twentieth of the writer's CPU per commit.
        marks = ", ".join(["?"] * len(ordered))
        cursor = conn.connection.cursor()
        try:
            cursor.execute(f"SELECT name, owner, epoch FROM toymb_topics WHERE name IN ({marks})", ordered)
            return {name: TopicRow(name, owner, epoch) for name, owner, epoch in cursor.fetchall()}
        finally:
            cursor.close()
    return {row.name: row for row in rows}


def _mysql_lock_timeouts(conn: Connection, lock_timeout_ms: int) -> None:
    """Set the lock wait and idle transaction timeouts (whole seconds, at least 1) of this session.

    MariaDB has no transaction-local settings, so they stay on the session, and so on the pooled
    connection; they are set again only when they change (``info`` lives as long as the connection).
    Both are bounds a healthy transaction never reaches. MySQL has no idle transaction timeout.
    """
    seconds = max(1, math.ceil(lock_timeout_ms / 1000))
    info = conn.connection.info
    if info.get("toymb_lock_timeout_s") == seconds:
        return
    idle = f", SESSION idle_transaction_timeout = {seconds}" if getattr(conn.dialect, "is_mariadb", False) else ""
    conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {seconds}{idle}")
    info["toymb_lock_timeout_s"] = seconds


def upsert_keep_larger(dialect_name: str, table: Table, keys: Sequence[str], column: str) -> Insert:
    """``INSERT`` into ``table`` that, for a row whose ``keys`` exist already, keeps the larger ``column``."""
    current = table.c[column]

    def larger(given: Any) -> Any:
        return case((given > current, given), else_=current)

    if is_mysql(dialect_name):
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        stmt = mysql_insert(table)
        return stmt.on_duplicate_key_update({column: larger(stmt.inserted[column])})
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        pg = pg_insert(table)
        return pg.on_conflict_do_update(index_elements=list(keys), set_={column: larger(pg.excluded[column])})
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    lite = sqlite_insert(table)
    return lite.on_conflict_do_update(index_elements=list(keys), set_={column: larger(lite.excluded[column])})
