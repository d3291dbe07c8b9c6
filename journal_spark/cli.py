"""``toymb journal run`` and ``toymb journal replay`` (added to ``toymb`` by broker/cli.py)."""

from __future__ import annotations

import logging
import os
from typing import Any

import click

from broker.config import load_settings
from broker.lazy_commands import LazyGroup
from broker.logs import setup_logging

from .errors import JournalError


# ``toymb journal ingress`` (Kafka) and ``toymb journal jms-ingress`` (JMS) beside ``run``, imported
# only when one of them runs: ``journal run`` loads no bridge client.
@click.group(cls=LazyGroup, lazy={"ingress": ("journal_spark.ingress_cli", "ingress"),
                                  "jms-ingress": ("journal_spark.jms.cli", "jms_ingress")})
def journal() -> None:
    """The Spark journal: a Delta table of every message, and replay from it."""


@journal.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="properties file")
@click.option("--database-url", help="SQLAlchemy URL of the store [TOYMB_DATABASE_URL]")
@click.option("--data-dir", help="folder of the SQLite store, and default journal home [TOYMB_DATA_DIR]")
@click.option("--routes", help="routes properties file for bridges [TOYMB_ROUTES]")
@click.option("--journal-dir", help="Parquet journal folder [TOYMB_JOURNAL_DIR]")
@click.option("--checkpoint-dir", help="Spark checkpoint folder [TOYMB_CHECKPOINT_DIR]")
@click.option("--tmp-dir", "journal_tmp_dir",
              help="folder of the job's temporary files, a subfolder per process [TOYMB_JOURNAL_TMP_DIR]")
@click.option("--master", "spark_master",
              help="Spark master, local[*] or spark://host:7077 [TOYMB_SPARK_MASTER]")
@click.option("--max-rows", "journal_max_rows", type=int,
              help="most rows per micro-batch [TOYMB_JOURNAL_MAX_ROWS]")
@click.option("--trigger-ms", "journal_trigger_ms", type=int,
              help="micro-batch interval [TOYMB_JOURNAL_TRIGGER_MS]")
@click.option("--metrics-port", "journal_metrics_port", type=int,
              help="port of /metrics, 0 for none [TOYMB_JOURNAL_METRICS_PORT]")
@click.option("--lease-ms", "journal_lease_ms", type=int,
              help="lease period; a second process stands by and takes over [TOYMB_JOURNAL_LEASE_MS]")
@click.option("--once", is_flag=True, help="journal what is in the store now, then stop")
def run(config_file: str | None, once: bool, **flags: Any) -> None:
    """Journal the store's messages to the Delta table (and bridge them, with --routes) until stopped."""
    settings = load_settings(config_file, **flags)
    setup_logging(settings.log_level)
    from .job import run as run_job

    try:
        run_job(settings, once=once)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None


@journal.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="properties file")
@click.option("--data-dir", help="default journal home is <data-dir>/journal [TOYMB_DATA_DIR]")
@click.option("--journal-dir", help="Parquet journal folder [TOYMB_JOURNAL_DIR]")
@click.option("--topic", required=True, help="journaled topic to replay")
@click.option("--to-topic", help="topic to publish into (default: the same name)")
@click.option("--from-ts", type=int, help="first timestamp, ms since the epoch (inclusive)")
@click.option("--to-ts", type=int, help="last timestamp, ms since the epoch (exclusive)")
@click.option("--as-of", help="replay the table as it was then: ISO 8601 time or ms since the epoch")
@click.option("--to-url", required=True, help="broker URL to publish to, e.g. http://127.0.0.1:8080")
@click.option("--batch", type=click.IntRange(1, 1000), default=500, show_default=True,
              help="messages per POST")
@click.option("--token", envvar="TOYMB_TOKEN", help="bearer token [TOYMB_TOKEN]")
def replay(config_file: str | None, topic: str, to_topic: str | None, from_ts: int | None, to_ts: int | None,
           as_of: str | None, to_url: str, batch: int, token: str | None, **flags: Any) -> None:
    """Republish a topic's journaled messages (original ids, so repeats are harmless)."""
    settings = load_settings(config_file, **flags)
    setup_logging(settings.log_level)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    from .replay import parse_as_of
    from .replay import replay as run_replay

    if from_ts is not None and to_ts is not None and from_ts >= to_ts:
        raise click.BadParameter("--from-ts must be before --to-ts")
    try:
        result = run_replay(settings.effective_journal_dir, topic, to_url, to_topic=to_topic, from_ts=from_ts,
                            to_ts=to_ts, as_of=parse_as_of(as_of) if as_of else None, batch=batch,
                            token=token or os.environ.get("TOYMB_TOKEN"))
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"replayed {result.read} messages of {topic}: {result.stored} stored, "
               f"{result.duplicates} already there")


@journal.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="properties file")
@click.option("--data-dir", help="default journal home is <data-dir>/journal [TOYMB_DATA_DIR]")
@click.option("--journal-dir", help="Delta journal table folder [TOYMB_JOURNAL_DIR]")
@click.option("--keep-days", type=click.IntRange(0), help="delete days older than this many (default: keep all)")
@click.option("--vacuum-hours", type=click.IntRange(0), default=168, show_default=True,
              help="remove files no table version of the last this many hours needs")
def compact(config_file: str | None, keep_days: int | None, vacuum_hours: int, **flags: Any) -> None:
    """Retention and compaction of the journal table: Delta's DELETE, OPTIMIZE and VACUUM."""
    settings = load_settings(config_file, **flags)
    setup_logging(settings.log_level)
    from .maintenance import compact as run_compact

    try:
        done = run_compact(settings.effective_journal_dir, keep_days=keep_days, vacuum_hours=vacuum_hours)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"deleted {done.deleted_rows} rows; compacted {done.files_removed} files into {done.files_added}; "
               f"vacuumed {done.vacuumed} files")
