"""All settings of a node (and of the journal job), in one place, validated once at startup.

Precedence, lowest first: defaults, the properties file (ToyMB's names or ours), ToyMB's names
in the environment (:mod:`broker.toymb_names`), ``TOYMB_*`` environment variables, then
command-line flags. An unknown key in the file or an unknown
``TOYMB_*`` variable is a :class:`~broker.errors.ConfigError`, so a typo never goes unnoticed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from . import toymb_names
from .errors import ConfigError

# Variables read by other programs of the distribution (driver, tests), not by a node.
CLIENT_ENV = {"TOYMB_URLS", "TOYMB_TOKEN", "TOYMB_CONSUMER_PORT", "TOYMB_CONSUMER_HOST", "TOYMB_ADVERTISE_URL",
              "TOYMB_APP_NAME", "TOYMB_INSTANCE", "TOYMB_PUSH_PATH", "TOYMB_BRIDGE_URL", "TOYMB_BRIDGE_PORT",
              "TOYMB_INGRESS_METRICS_PORT"}
# Read by other programs of the project, never by a node: tests, benchmarks, services/ scripts, and
# the journal's jar lookup (TOYMB_DELTA_JARS, TOYMB_DELTA_VERSION; journal_spark/delta_jars.py).
CLIENT_ENV_PREFIXES = ("TOYMB_TEST_", "TOYMB_BENCH_", "TOYMB_SERVICES_", "TOYMB_KAFKA_", "TOYMB_SPARK_", "TOYMB_DELTA_")


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _positive(parse: Callable[[str], int]) -> Callable[[str], int]:
    def check(text: str) -> int:
        value = parse(text)
        if value <= 0:
            raise ValueError(f"must be positive, got {value}")
        return value

    return check


def _at_least(low: int) -> Callable[[str], int]:
    def check(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(f"must be at least {low}, got {value}")
        return value

    return check


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"must be zero or more, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"not a TCP port: {value}")
    return value


@dataclasses.dataclass(frozen=True)
class Setting:
    attr: str
    parse: Callable[[str], Any]
    default: Any
    file_keys: tuple[str, ...] = ()
    doc: str = ""

    @property
    def env(self) -> str:
        return "TOYMB_" + self.attr.upper()


_pos = _positive(int)


def _field(default: Any, parse: Callable[[str], Any], doc: str, *file_keys: str) -> Any:
    """A setting: its default, the parser of its text form, its doc, and its properties-file keys."""
    return dataclasses.field(default=default, metadata={"parse": parse, "doc": doc, "file_keys": file_keys})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Validated, typed settings. Build them with :func:`load`; the defaults alone are ``Settings()``."""

    node_name: str = _field("toymb-1", str, "stable node name; its id is derived from it", "node.name")
    host: str = _field("127.0.0.1", str, "address to bind", "server.address")
    port: int = _field(8080, _port, "port to serve HTTP on", "server.port")
    node_url: str = _field("", str, "URL other nodes reach this one at (default http://host:port)", "node.url")
    data_dir: str = _field("./data", str, "folder for SQLite and local state", "data.dir")
    database_url: str = _field("", str, "SQLAlchemy URL, or memory://<name>; default SQLite under data_dir",
                               "datasource.url")
    topics: tuple[str, ...] = _field((), _list, "topics created at startup", "topics")
    enriching_topics: tuple[str, ...] = _field((), _list, "topic=package.module:Class, comma-separated",
                                               "enrichingtopics")
    peers: tuple[str, ...] = _field((), _list, "bootstrap peer URLs (optional with a shared database)", "peers")
    default_partitions: int = _field(100, _pos, "partitions of a topic created on first use", "partitions")
    max_partitions: int = _field(1000, _pos, "largest partition count a topic may ask for")
    max_body: int = _field(1 << 20, _pos, "largest message body in bytes", "max.body")
    max_request: int = _field(16 << 20, _pos, "largest HTTP request body in bytes")
    max_batch: int = _field(1000, _pos, "most messages in one publish request")
    max_headers: int = _field(64, _pos, "most headers on one message")
    max_header_name: int = _field(256, _pos, "longest header name")
    max_header_value: int = _field(8192, _pos, "longest header value")
    max_id: int = _field(256, _pos, "longest message id or key")
    threads: int = _field(32, _pos, "WSGI worker threads")
    # Off by default: a worker thread validates a publish and is free at once (its commit answers it
    # either way); on a loaded machine one loop thread doing that too answered fewer publishes (README).
    inline_publish: bool = _field(False, _bool, "validate small publishes on the server's loop thread instead of "
                                  "a worker thread (less CPU a publish, slower on a busy machine: off)")
    max_connections: int = _field(
        1000, _pos,
        "most open HTTP connections; past it the least recently active idle one is closed (503 if all are busy)")
    idle_timeout_ms: int = _field(30000, _pos, "an HTTP connection with no request in progress is closed after this")
    header_timeout_ms: int = _field(10000, _pos, "a request's headers must be in this long after its first byte")
    commit_max_rows: int = _field(5000, _pos, "most rows in one group commit")
    push_max_attempts: int = _field(5, _pos, "push attempts before a message is dead-lettered")
    push_timeout_ms: int = _field(5000, _pos, "total deadline of one push request: connect, send and answer")
    push_backoff_ms: int = _field(200, _pos, "first retry delay; doubles each attempt, with jitter")
    push_backoff_max_ms: int = _field(10000, _pos, "longest retry delay")
    push_batch: int = _field(100, _pos, "most messages in one push request")
    push_fail_limit: int = _field(3, _pos, "dead-lettered messages in a row before a push subscriber loses its lease")
    dlq_suffix: str = _field(".dlq", str, "suffix of the dead-letter topic")
    push_workers: int = _field(
        64, _pos,
        "most pushes in flight: one per push subscriber, so a slow receiver holds only its own")
    push_in_flight: int = _field(
        4, _pos, "most push requests in flight to one push subscriber, each on partitions of its own")
    push_max_bytes: int = _field(4 << 20, _pos, "largest push request body in bytes (at least one message)")
    subscriber_lease_ms: int = _field(15000, _pos, "a subscriber without heartbeat for this long is dropped")
    redelivery_ms: int = _field(30000, _pos, "fetched but uncommitted messages come back after this")
    pull_max_deliveries: int = _field(5, _pos, "fetches of a message without a commit before it is dead-lettered")
    max_wait_ms: int = _field(30000, _non_negative, "longest long-poll wait")
    max_fetch: int = _field(1000, _pos, "most messages in one fetch")
    fetch_max_bytes: int = _field(4 << 20, _pos, "most message bytes in one fetch (at least one message)")
    max_subscribers: int = _field(1000, _pos, "most subscribers in one group")
    node_lease_ms: int = _field(6000, _pos, "a node without heartbeat for this long is dead")
    heartbeat_ms: int = _field(1000, _pos, "node heartbeat interval")
    forward_timeout_ms: int = _field(10000, _pos, "timeout of a forwarded request")
    tokens: tuple[str, ...] = _field((), _list, "token=role[+role]@pattern[|pattern], comma-separated", "tokens")
    cluster_token: str = _field("", str, "token nodes use to call each other", "cluster.token")
    push_allow: tuple[str, ...] = _field((), _list, "CIDRs and host patterns push URLs may point at", "push.allow")
    allow_remote: bool = _field(False, _bool, "serve non-loopback clients without tokens")
    legacy_networks: tuple[str, ...] = _field(
        (), _list, "CIDR=role[+role]@pattern: networks whose token-less ToyMB clients may call the ToyMB "
        "endpoints, and be pushed to (off by default; see the README's risk)", "legacy.networks")
    tls_cert: str = _field("", str, "PEM certificate to serve HTTPS", "server.ssl.certificate")
    tls_key: str = _field("", str, "PEM key to serve HTTPS", "server.ssl.certificate-private-key")
    retention_ms: int = _field(0, _non_negative, "drop journaled, consumed rows older than this (0 keeps)", "retention")
    retention_interval_ms: int = _field(10000, _pos, "how often retention looks for rows to delete")
    retention_batch: int = _field(5000, _pos, "most rows one retention DELETE removes")
    journal_dir: str = _field("", str, "Parquet journal folder (default data_dir/journal)", "journal.dir")
    checkpoint_dir: str = _field("", str, "Spark checkpoint folder", "journal.checkpoint")
    routes: str = _field("", str, "routes properties file for the bridges", "journal.routes")
    journal_tmp_dir: str = _field("", str, "folder of the journal's temporary files, a subfolder per process "
                                  "(default $XDG_CACHE_HOME/toymb/journal-tmp)", "journal.tmp.dir")
    spark_master: str = _field("local[*]", str, "Spark master URL", "spark.master")
    journal_max_rows: int = _field(200000, _pos, "most rows in one journal micro-batch")
    # 500: a message waits for the next trigger, then one batch (about 0.3 s), so the lag's p95 is
    # about 0.95 x interval + one batch: above 1 s at 1000 ms whatever a batch costs. 500 ms fits
    # since the log checkpoints left the commit path (README, "Lag and the trigger").
    journal_trigger_ms: int = _field(500, _pos, "journal micro-batch interval")
    journal_metrics_port: int = _field(9464, _port, "port of the journal's /metrics (0: off)")
    journal_lease_ms: int = _field(10000, _pos, "lease period of the active journal process; a standby "
                                   "takes over once it expires")
    console_refresh_ms: int = _field(2000, _at_least(500), "how often the console page refreshes (at least 500)")
    console_bridges: tuple[str, ...] = _field(
        (), _list, "NAME=URL of bridge management APIs the console shows and may pause/resume, comma-separated "
        "(the node calls only these)", "console.bridges")
    console_journal_metrics: str = _field("", str, "URL of the journal job's /metrics the console reads its health "
                                          "from (empty: the store's journaled offsets only)",
                                          "console.journal.metrics")
    log_level: str = _field("INFO", str, "logging level")

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'toymb.db'}"

    @property
    def effective_node_url(self) -> str:
        if self.node_url:
            return self.node_url.rstrip("/")
        scheme = "https" if self.tls_cert else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def effective_journal_dir(self) -> str:
        return str(self.journal_dir or Path(self.data_dir) / "journal")

    @property
    def effective_checkpoint_dir(self) -> str:
        return str(self.checkpoint_dir or Path(self.data_dir) / "checkpoints")

    def replace(self, **changes: Any) -> Settings:
        """These settings with ``changes`` applied and validated again."""
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return load(env={}, overrides={**current, **changes})


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(f.name, f.metadata["parse"], f.default, f.metadata["file_keys"], f.metadata["doc"])
    for f in dataclasses.fields(Settings))
_BY_ATTR = {s.attr: s for s in SETTINGS}
_BY_FILE_KEY = {key: s for s in SETTINGS for key in (s.file_keys + (s.attr.replace("_", "."),))}


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Parse a Java-style properties file (``key=value`` or ``key: value``, ``#`` comments)."""
    result: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        result[line[:sep].strip()] = line[sep + 1 :].strip()
    return result


def load(
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build :class:`Settings` from defaults, a properties file, the environment and overrides.

    Raises:
        ConfigError: a key is unknown or a value does not parse.
    """
    environ = os.environ if env is None else env
    values: dict[str, Any] = {s.attr: s.default for s in SETTINGS}

    def apply(setting: Setting, raw: Any, where: str) -> None:
        if not isinstance(raw, str):
            values[setting.attr] = raw
            return
        try:
            values[setting.attr] = setting.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{where}: bad value {raw!r} for {setting.attr}: {exc}") from None

    config_file = config_file or environ.get("TOYMB_CONFIG") or None
    datasource: dict[str, str] = {}  # ToyMB's spring.datasource.* and spring.jpa.* keys, file then environment
    if config_file:
        for key, raw in read_properties(config_file).items():
            if toymb_names.is_toymb_key(key):
                datasource[key] = raw
                continue
            setting = _BY_FILE_KEY.get(key)
            if setting is None:
                raise ConfigError(f"{config_file}: unknown key {key!r}")
            apply(setting, raw, f"{config_file}: {key}")
    # ToyMB's names in the environment (its compose file's dotted ones, or Spring's relaxed forms)
    # rank above the file and below TOYMB_* variables.
    for key, raw in toymb_names.from_environment(environ).items():
        if toymb_names.is_toymb_key(key):
            datasource[key] = raw
        else:
            apply(_BY_FILE_KEY[key], raw, f"environment {key}")
    url = toymb_names.datasource_url(datasource, "ToyMB's spring.datasource settings")
    if url is not None:
        apply(_BY_ATTR["database_url"], url, "spring.datasource.url")
    for name, raw in environ.items():
        if not name.startswith("TOYMB_") or name == "TOYMB_CONFIG":
            continue
        if name in CLIENT_ENV or name.startswith(CLIENT_ENV_PREFIXES):
            continue
        setting = _BY_ATTR.get(name[len("TOYMB_") :].lower())
        if setting is None:
            raise ConfigError(f"unknown environment variable {name}")
        apply(setting, raw, name)
    for attr, raw in (overrides or {}).items():
        if raw is None:
            continue
        setting = _BY_ATTR.get(attr)
        if setting is None:
            raise ConfigError(f"unknown setting {attr!r}")
        apply(setting, raw, f"--{attr.replace('_', '-')}")
    _validate(values)
    return Settings(**values)


def load_settings(config_file: str | None, **overrides: Any) -> Settings:
    """:func:`load` for a command line: the properties file and the flags given (None: not given).

    Raises:
        click.ClickException: the settings are invalid (a :class:`~broker.errors.ConfigError`'s message).
    """
    try:
        return load(config_file, overrides=overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _validate(values: dict[str, Any]) -> None:
    if bool(values["tls_cert"]) != bool(values["tls_key"]):
        raise ConfigError("tls_cert and tls_key must be set together")
    if values["default_partitions"] > values["max_partitions"]:
        raise ConfigError("default_partitions is larger than max_partitions")
    for item in values["enriching_topics"]:
        topic, sep, target = item.partition("=")
        if not sep or ":" not in target or not topic:
            raise ConfigError(f"enriching topic {item!r} is not topic=package.module:Class")
    url = values["database_url"]
    # memory://<name> keeps everything in the node's process: one node alone, gone when it stops.
    if url and not url.startswith(("sqlite", "postgresql", "mysql", "mariadb", "memory://")):
        raise ConfigError(f"database_url must be sqlite://, postgresql:// or mysql:// (MariaDB) (or memory://<name> "
                          f"for a node alone), got {url!r}")
    _validate_console(values["console_bridges"], values["console_journal_metrics"])
    if values["log_level"].upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ConfigError(f"log_level must be DEBUG, INFO, WARNING or ERROR, got {values['log_level']!r}")


_CONSOLE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _validate_console(bridges: tuple[str, ...], journal_metrics: str) -> None:
    """The console calls only these addresses, so each must be a plain http(s) URL with a unique name."""
    seen: set[str] = set()
    for item in bridges:
        name, sep, url = item.partition("=")
        if not sep or not _CONSOLE_NAME.fullmatch(name) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"console bridge {item!r} is not NAME=http://host:port (NAME: letters, digits, ._-)")
        if name in seen:
            raise ConfigError(f"console bridge name {name!r} is given twice")
        seen.add(name)
    if journal_metrics and not journal_metrics.startswith(("http://", "https://")):
        raise ConfigError(f"console_journal_metrics must be an http(s) URL, got {journal_metrics!r}")
