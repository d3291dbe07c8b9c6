"""What the store's failures mean to the rest of the broker, named once.

The driver's exception classes stay inside ``broker/store/``; callers catch these groups:

- :data:`STORE_UNAVAILABLE`: the database cannot be reached or answer now (503, retry later);
- :data:`STORE_REFUSED_VALUE`: the database refused a value of the request (400);
- :data:`STORE_ERROR`: any failure of the store, the two above included.

SQLAlchemy wraps the driver's exceptions in its own, except where a repository uses the DB-API
cursor directly (the journal's range reads, the SQLite writer's statements): those raise the
driver's, so PyMySQL's and sqlite3's are named too.
"""

from __future__ import annotations

import sqlite3

from pymysql import err as mysql_err
from sqlalchemy.exc import DataError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

STORE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout,
                                                  mysql_err.OperationalError, mysql_err.InterfaceError,
                                                  sqlite3.OperationalError, sqlite3.InterfaceError)
STORE_REFUSED_VALUE: tuple[type[Exception], ...] = (DataError, mysql_err.DataError, sqlite3.DataError)
STORE_ERROR: tuple[type[Exception], ...] = (SQLAlchemyError, mysql_err.Error, sqlite3.Error)
