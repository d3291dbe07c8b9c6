"""ToyMB's configuration names, as ToyMB's users pass them, read into this project's settings.

ToyMB is a Spring Boot application. Its compose file passes ``spring.datasource.url``,
``node.name``, ``server.port``, ``topics``, ``peers`` and ``enrichingtopics`` as environment
variables with dots in their names, and Spring also reads them in their relaxed forms
(``SPRING_DATASOURCE_URL``, ``NODE_NAME``, ...). Its database is a JDBC URL with the user and
password in separate keys. This module turns those into the properties-file keys of
:mod:`broker.config`, so that they are validated, and rank, like every other setting.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import parse_qsl, quote

from .errors import ConfigError

log = logging.getLogger(__name__)

# ToyMB's keys that map one to one onto a setting's properties-file key.
PLAIN_KEYS = ("node.name", "server.port", "topics", "peers", "enrichingtopics")
DATASOURCE_KEYS = ("spring.datasource.url", "spring.datasource.username", "spring.datasource.password",
                   "spring.datasource.driver-class-name")
JPA_PREFIX = "spring.jpa."

# JDBC subprotocol -> (the store's URL scheme, the JDBC drivers that speak it).
_JDBC = {
    "postgresql": ("postgresql", {"org.postgresql.Driver"}),
    "mysql": ("mysql", {"com.mysql.cj.jdbc.Driver", "com.mysql.jdbc.Driver", "org.mariadb.jdbc.Driver"}),
    "mariadb": ("mariadb", {"org.mariadb.jdbc.Driver"}),
}


def relaxed(key: str) -> str:
    """Spring's relaxed environment form of a dotted key: ``spring.datasource.url`` -> ``SPRING_DATASOURCE_URL``."""
    return key.replace(".", "_").replace("-", "").upper()


def from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """ToyMB's keys found in ``environ``, dotted (as its compose file passes them) or relaxed.

    The dotted form wins over the relaxed one when both are set, as in Spring.
    """
    found: dict[str, str] = {}
    for key in PLAIN_KEYS + DATASOURCE_KEYS:
        if key in environ:
            found[key] = environ[key]
        elif relaxed(key) in environ:
            found[key] = environ[relaxed(key)]
    for name, value in environ.items():
        if name.startswith(JPA_PREFIX):
            found[name] = value
        elif name.startswith(relaxed(JPA_PREFIX)):
            found[name.lower().replace("_", ".")] = value
    return found


def is_toymb_key(key: str) -> bool:
    """A key of ToyMB's that :func:`datasource_url` (and not a setting) reads."""
    return key in DATASOURCE_KEYS or key.startswith(JPA_PREFIX)


def datasource_url(keys: Mapping[str, str], where: str) -> str | None:
    """The store URL that ToyMB's ``spring.datasource.*`` keys describe, or None when they name none.

    ``spring.jpa.*`` keys are accepted (Hibernate's settings have nothing to act on here) with one
    warning.

    Raises:
        ConfigError: an H2 or unknown JDBC URL, a driver class that does not match the URL, or
            credentials without a URL.
    """
    jpa = sorted(k for k in keys if k.startswith(JPA_PREFIX))
    if jpa:
        log.warning("%s: %s ignored: Hibernate's settings have no effect on this broker's store", where,
                    ", ".join(jpa))
    url = keys.get("spring.datasource.url", "").strip()
    user = keys.get("spring.datasource.username", "")
    password = keys.get("spring.datasource.password", "")
    driver = keys.get("spring.datasource.driver-class-name", "").strip()
    if not url:
        if user or password or driver:
            raise ConfigError(f"{where}: spring.datasource.username, password or driver-class-name "
                              "without spring.datasource.url")
        return None
    if not url.startswith("jdbc:"):
        raise ConfigError(f"{where}: spring.datasource.url must be a JDBC URL (jdbc:postgresql://, jdbc:mysql:// or "
                          f"jdbc:mariadb://), got {url!r}")
    subprotocol, _, rest = url[len("jdbc:"):].partition(":")
    if subprotocol == "h2":
        raise ConfigError(f"{where}: H2 is not supported. SQLite is the embedded default: leave "
                          "spring.datasource.url unset for a node alone, or give a PostgreSQL or MySQL/MariaDB URL")
    if subprotocol not in _JDBC or not rest.startswith("//"):
        raise ConfigError(f"{where}: unsupported JDBC URL {url!r}: use jdbc:postgresql://, jdbc:mysql:// or "
                          "jdbc:mariadb://")
    scheme, drivers = _JDBC[subprotocol]
    if driver and driver not in drivers:
        raise ConfigError(f"{where}: spring.datasource.driver-class-name {driver} does not speak {url!r}")
    location, _, query = rest[2:].partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    # Credentials in the URL's query (jdbc:postgresql://h/db?user=u&password=p) yield to the keys.
    user = user or params.pop("user", "")
    password = password or params.pop("password", "")
    params.pop("user", None)
    params.pop("password", None)
    if params:
        # JDBC driver options (useSSL, serverTimezone, ...) mean nothing to the Python drivers.
        log.warning("%s: JDBC options %s ignored", where, ", ".join(sorted(params)))
    if "/" not in location or not location.split("/", 1)[0]:
        raise ConfigError(f"{where}: spring.datasource.url {url!r} names no host and database")
    credentials = ""
    if user:
        credentials = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
    return f"{scheme}://{credentials}{location}"
