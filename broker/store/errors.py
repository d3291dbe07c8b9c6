"""What the store's failures mean to the rest of the broker, named once.

The driver's exception classes stay inside ``broker/store/``; callers catch these groups:

- :data:`STORE_UNAVAILABLE`: the database cannot be reached or answer now (503, retry later);
- :data:`STORE_REFUSED_VALUE`: the database refused a value of the request (400);
- :data:`STORE_ERROR`: any failure of the store, the two above included.
"""

from __future__ import annotations

from sqlalchemy.exc import DataError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

STORE_UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)
STORE_REFUSED_VALUE: tuple[type[Exception], ...] = (DataError,)
STORE_ERROR: tuple[type[Exception], ...] = (SQLAlchemyError,)
