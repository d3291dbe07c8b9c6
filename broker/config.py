"""All settings of a node (and of the journal job), in one place, validated once at startup.

Precedence, lowest first: defaults, the properties file (ToyMB's names or ours), ``TOYMB_*``
environment variables, then command-line flags. An unknown key in the file or an unknown
``TOYMB_*`` variable is a :class:`~broker.errors.ConfigError`, so a typo never goes unnoticed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,200}$"

# Variables read by other programs of the distribution (driver, tests), not by a node.
CLIENT_ENV = {"TOYMB_URLS", "TOYMB_TOKEN", "TOYMB_CONSUMER_PORT", "TOYMB_CONSUMER_HOST", "TOYMB_ADVERTISE_URL",
              "TOYMB_APP_NAME", "TOYMB_INSTANCE", "TOYMB_PUSH_PATH", "TOYMB_BRIDGE_URL", "TOYMB_BRIDGE_PORT",
              "TOYMB_INGRESS_METRICS_PORT"}
CLIENT_ENV_PREFIXES = ("TOYMB_TEST_", "TOYMB_BENCH_", "TOYMB_SERVICES_", "TOYMB_KAFKA_", "TOYMB_SPARK_")


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

SETTINGS: tuple[Setting, ...] = (
    Setting("node_name", str, "toymb-1", ("node.name",), "stable node name; its id is derived from it"),
    Setting("host", str, "127.0.0.1", ("server.address",), "address to bind"),
    Setting("port", _port, 8080, ("server.port",), "port to serve HTTP on"),
    Setting("node_url", str, "", ("node.url",), "URL other nodes reach this one at (default http://host:port)"),
    Setting("data_dir", str, "./data", ("data.dir",), "folder for SQLite and local state"),
    Setting("database_url", str, "", ("datasource.url",), "SQLAlchemy URL; default SQLite under data_dir"),
    Setting("topics", _list, (), ("topics",), "topics created at startup"),
    Setting("enriching_topics", _list, (), ("enrichingtopics",), "topic=package.module:Class, comma-separated"),
    Setting("peers", _list, (), ("peers",), "bootstrap peer URLs (optional with a shared database)"),
    Setting("default_partitions", _pos, 100, ("partitions",), "partitions of a topic created on first use"),
    Setting("max_partitions", _pos, 1000, (), "largest partition count a topic may ask for"),
    Setting("max_body", _pos, 1 << 20, ("max.body",), "largest message body in bytes"),
    Setting("max_request", _pos, 16 << 20, (), "largest HTTP request body in bytes"),
    Setting("max_batch", _pos, 1000, (), "most messages in one publish request"),
    Setting("max_headers", _pos, 64, (), "most headers on one message"),
    Setting("max_header_name", _pos, 256, (), "longest header name"),
    Setting("max_header_value", _pos, 8192, (), "longest header value"),
    Setting("max_id", _pos, 256, (), "longest message id or key"),
    Setting("threads", _pos, 32, (), "WSGI worker threads"),
    Setting("max_connections", _pos, 1000, (), "most open HTTP connections; past it the least recently active idle "
            "one is closed (503 if all are busy)"),
    Setting("idle_timeout_ms", _pos, 30000, (), "an HTTP connection with no request in progress is closed after this"),
    Setting("header_timeout_ms", _pos, 10000, (), "a request's headers must be in this long after its first byte"),
    Setting("commit_max_rows", _pos, 5000, (), "most rows in one group commit"),
    Setting("push_max_attempts", _pos, 5, (), "push attempts before a message is dead-lettered"),
    Setting("push_timeout_ms", _pos, 5000, (), "total deadline of one push request: connect, send and answer"),
    Setting("push_backoff_ms", _pos, 200, (), "first retry delay; doubles each attempt, with jitter"),
    Setting("push_backoff_max_ms", _pos, 10000, (), "longest retry delay"),
    Setting("push_batch", _pos, 100, (), "most messages in one push request"),
    Setting("push_fail_limit", _pos, 3, (), "dead-lettered messages in a row before a push subscriber loses its lease"),
    Setting("dlq_suffix", str, ".dlq", (), "suffix of the dead-letter topic"),
    Setting("push_workers", _pos, 64, (), "most pushes in flight: one per push subscriber, so a slow receiver "
            "holds only its own"),
    Setting("push_max_bytes", _pos, 4 << 20, (), "largest push request body in bytes (at least one message)"),
    Setting("subscriber_lease_ms", _pos, 15000, (), "a subscriber without heartbeat for this long is dropped"),
    Setting("redelivery_ms", _pos, 30000, (), "fetched but uncommitted messages come back after this"),
    Setting("pull_max_deliveries", _pos, 5, (), "fetches of a message without a commit before it is dead-lettered"),
    Setting("max_wait_ms", _non_negative, 30000, (), "longest long-poll wait"),
    Setting("max_fetch", _pos, 1000, (), "most messages in one fetch"),
    Setting("fetch_max_bytes", _pos, 4 << 20, (), "most message bytes in one fetch (at least one message)"),
    Setting("max_subscribers", _pos, 1000, (), "most subscribers in one group"),
    Setting("node_lease_ms", _pos, 6000, (), "a node without heartbeat for this long is dead"),
    Setting("heartbeat_ms", _pos, 1000, (), "node heartbeat interval"),
    Setting("forward_timeout_ms", _pos, 10000, (), "timeout of a forwarded request"),
    Setting("tokens", _list, (), ("tokens",), "token=role[+role]@pattern[|pattern], comma-separated"),
    Setting("cluster_token", str, "", ("cluster.token",), "token nodes use to call each other"),
    Setting("push_allow", _list, (), ("push.allow",), "CIDRs and host patterns push URLs may point at"),
    Setting("allow_remote", _bool, False, (), "serve non-loopback clients without tokens"),
    Setting("tls_cert", str, "", ("server.ssl.certificate",), "PEM certificate to serve HTTPS"),
    Setting("tls_key", str, "", ("server.ssl.certificate-private-key",), "PEM key to serve HTTPS"),
    Setting("retention_ms", _non_negative, 0,("retention",), "drop journaled, consumed rows older than this (0 keeps)"),
    Setting("retention_interval_ms", _pos, 10000, (), "how often retention looks for rows to delete"),
    Setting("retention_batch", _pos, 5000, (), "most rows one retention DELETE removes"),
    Setting("journal_dir", str, "", ("journal.dir",), "Parquet journal folder (default data_dir/journal)"),
    Setting("checkpoint_dir", str, "", ("journal.checkpoint",), "Spark checkpoint folder"),
    Setting("routes", str, "", ("journal.routes",), "routes properties file for the bridges"),
    Setting("spark_master", str, "local[*]", ("spark.master",), "Spark master URL"),
    Setting("journal_max_rows", _pos, 200000, (), "most rows in one journal micro-batch"),
    Setting("journal_trigger_ms", _pos, 1000, (), "journal micro-batch interval"),
    Setting("journal_metrics_port", _port, 9464, (), "port of the journal's /metrics (0: off)"),
    Setting("log_level", str, "INFO", (), "logging level"),
)

_BY_ATTR = {s.attr: s for s in SETTINGS}
_BY_FILE_KEY = {key: s for s in SETTINGS for key in (s.file_keys + (s.attr.replace("_", "."),))}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Validated settings. Build them with :func:`load`."""

    values: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return str(self.database_url)
        return f"sqlite:///{Path(self.data_dir).resolve() / 'toymb.db'}"

    @property
    def effective_node_url(self) -> str:
        if self.node_url:
            return str(self.node_url).rstrip("/")
        scheme = "https" if self.tls_cert else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def effective_journal_dir(self) -> str:
        return str(self.journal_dir or Path(self.data_dir) / "journal")

    @property
    def effective_checkpoint_dir(self) -> str:
        return str(self.checkpoint_dir or Path(self.data_dir) / "checkpoints")

    def replace(self, **changes: Any) -> Settings:
        return load(env={}, overrides={**self.values, **changes})


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
    if config_file:
        for key, raw in read_properties(config_file).items():
            setting = _BY_FILE_KEY.get(key)
            if setting is None:
                raise ConfigError(f"{config_file}: unknown key {key!r}")
            apply(setting, raw, f"{config_file}: {key}")
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
    return Settings(values)


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
    if url and not url.startswith(("sqlite", "postgresql")):
        raise ConfigError(f"database_url must be sqlite:// or postgresql://, got {url!r}")
    if values["log_level"].upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ConfigError(f"log_level must be DEBUG, INFO, WARNING or ERROR, got {values['log_level']!r}")
