"""``toymb journal replay``: republish a topic's journaled messages into a broker topic.

Messages keep their ids, keys, headers, content types, bodies (byte for byte, as ``body_base64``)
and timestamps. A broker stores nothing for an id the topic already holds, so replaying into the
same topic, or replaying twice, is harmless.

The journal is a Delta table, read here without Spark (delta-rs, the ``deltalake`` package), so
replay sees exactly the committed batches, optionally the table *as of* a past time (Delta's time
travel: what was committed then, before later compactions or deletes).

Order: day after day (the table's ``date`` partitions), and within a day by (partition, offset),
so every partition is republished in its original order as long as its timestamps do not go back
across midnight. Memory is bounded by one topic-day, or one topic-partition-day when a day holds
more than ``DAY_ROWS`` rows.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from tqdm import tqdm

from driver import Template
from driver.errors import HTTPStatusError, TransportError

from .errors import ReplayError

COLUMNS = ["id", "partition", "offset", "key", "headers", "timestamp", "content_type", "body"]
RETRIES = 5
DAY_ROWS = 200_000


@dataclass
class ReplayResult:
    read: int = 0          # rows of the topic in the time range
    stored: int = 0        # newly stored by the broker
    duplicates: int = 0    # ids the target topic already held


def _date(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")


def parse_as_of(text: str) -> dt.datetime:
    """``--as-of``: ms since the epoch, or an ISO 8601 time (UTC unless it says otherwise)."""
    try:
        if text.isdigit():
            return dt.datetime.fromtimestamp(int(text) / 1000, tz=dt.UTC)
        moment = dt.datetime.fromisoformat(text)
    except (ValueError, OverflowError) as exc:
        raise ReplayError(f"--as-of {text!r} is neither ms since the epoch nor an ISO 8601 time") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def open_table(journal_dir: str | Path, as_of: dt.datetime | None = None) -> Any:
    """The journal's Delta table (as of ``as_of``), or :class:`ReplayError` saying why not."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        table = DeltaTable(str(journal_dir))
        if as_of is not None:
            # delta-rs loads the first version for any earlier time; the table did not exist then.
            first = min((int(c["timestamp"]) for c in table.history() if "timestamp" in c), default=None)
            if first is not None and as_of.timestamp() * 1000 < first:
                raise ReplayError(f"the journal {journal_dir} holds nothing as of {as_of.isoformat()}: "
                                  f"its first commit is {dt.datetime.fromtimestamp(first / 1000, dt.UTC).isoformat()}")
            table.load_as_version(as_of)
    except TableNotFoundError:
        raise ReplayError(f"{journal_dir} holds no journal table") from None
    except DeltaError as exc:
        raise ReplayError(f"cannot read the journal {journal_dir}"
                          f"{f' as of {as_of.isoformat()}' if as_of else ''}: {exc}") from None
    return table


def topic_days(table: Any, topic: str, from_ts: int | None, to_ts: int | None) -> dict[str, int]:
    """Rows per ``date`` partition of ``topic`` that can hold rows in [from_ts, to_ts), from the table's log."""
    actions = pa.table(table.get_add_actions(flatten=True))
    days: dict[str, int] = {}
    low = _date(from_ts) if from_ts is not None else None
    high = _date(to_ts) if to_ts is not None else None
    for t, day, rows in zip(actions["partition.topic"].to_pylist(), actions["partition.date"].to_pylist(),
                            actions["num_records"].to_pylist(), strict=True):
        if t != topic or (low is not None and day < low) or (high is not None and day > high):
            continue
        days[day] = days.get(day, 0) + int(rows or 0)
    return dict(sorted(days.items()))


def read_days(table: Any, topic: str, days: dict[str, int], from_ts: int | None,
              to_ts: int | None) -> Iterator[tuple[pa.Table, int]]:
    """Per day (or partition-day): its rows in the time range sorted by (partition, offset), and rows scanned."""
    dataset = table.to_pyarrow_dataset()
    for day, rows in days.items():
        where = (ds.field("topic") == topic) & (ds.field("date") == day)
        if from_ts is not None:
            where &= ds.field("timestamp") >= from_ts
        if to_ts is not None:
            where &= ds.field("timestamp") < to_ts
        if rows <= DAY_ROWS:
            chunk = dataset.to_table(columns=COLUMNS, filter=where)
            yield chunk.sort_by([("partition", "ascending"), ("offset", "ascending")]), rows
            continue
        partitions = pc.unique(dataset.to_table(columns=["partition"], filter=where)["partition"]).to_pylist()
        for n, partition in enumerate(sorted(partitions)):
            chunk = dataset.to_table(columns=COLUMNS, filter=where & (ds.field("partition") == partition))
            yield chunk.sort_by([("offset", "ascending")]), rows if n == len(partitions) - 1 else 0


def to_messages(table: pa.Table) -> list[dict[str, Any]]:
    """Publish-API messages (``body_base64``, so bytes survive whatever the content type)."""
    import base64

    out = []
    for row in table.to_pylist():
        message: dict[str, Any] = {
            "id": row["id"], "headers": dict(row["headers"] or []), "content_type": row["content_type"],
            "body_base64": base64.b64encode(row["body"]).decode("ascii"), "timestamp": row["timestamp"],
        }
        if row["key"] is not None:
            message["key"] = row["key"]
        out.append(message)
    return out


class Publisher:
    """Batched POSTs to ``/v1/topics/<topic>/messages``, retried on network errors and 5xx."""

    def __init__(self, url: str, topic: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.endpoint = f"{url.rstrip('/')}/v1/topics/{topic}/messages"
        self.topic = topic
        # The driver's client, with no retries of its own: this loop decides what is retried.
        self.template = Template(url, token=token, timeout=timeout, retries=0)

    def send(self, messages: list[dict[str, Any]]) -> tuple[int, int]:
        """Publish ``messages``; returns (newly stored, duplicates)."""
        error = ""
        for attempt in range(RETRIES):
            try:
                answers = self.template.publish_encoded(self.topic, messages)
            except HTTPStatusError as exc:
                if (exc.status_code or 500) < 500:
                    raise ReplayError(f"{self.endpoint} refused the messages ({exc.status_code}): "
                                      f"{exc.response.text[:300] if exc.response is not None else exc}") from None
                error = str(exc)[:300]
            except TransportError as exc:
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
            else:
                dups = sum(1 for a in answers if a.get("duplicate"))
                return len(answers) - dups, dups
            time.sleep(min(5.0, 0.2 * 2 ** attempt))   # same ids, so retrying is safe
        raise ReplayError(f"cannot publish to {self.endpoint} after {RETRIES} attempts: {error}")

    def close(self) -> None:
        self.template.close()


def replay(journal_dir: str | Path, topic: str, to_url: str, *, to_topic: str | None = None,
           from_ts: int | None = None, to_ts: int | None = None, as_of: dt.datetime | None = None,
           batch: int = 500, token: str | None = None, progress: bool | None = None) -> ReplayResult:
    """Republish ``topic``'s journaled messages with ``from_ts <= timestamp < to_ts`` to ``to_url``,
    from the table as it was at ``as_of`` (default: now).

    Raises:
        ReplayError: the journal has no such topic (then), or the broker refused the messages.
    """
    table = open_table(journal_dir, as_of)
    days = topic_days(table, topic, from_ts, to_ts)
    if not days and not topic_days(table, topic, None, None):
        raise ReplayError(f"the journal {journal_dir} holds no topic {topic!r}"
                          f"{f' as of {as_of.isoformat()}' if as_of else ''}")
    show = sys.stderr.isatty() if progress is None else progress
    result = ReplayResult()
    publisher = Publisher(to_url, to_topic or topic, token)
    try:
        with tqdm(total=sum(days.values()), unit="msg", disable=not show, desc=f"replay {topic}") as bar:
            for chunk, scanned in read_days(table, topic, days, from_ts, to_ts):
                result.read += chunk.num_rows
                for start in range(0, chunk.num_rows, batch):
                    stored, dups = publisher.send(to_messages(chunk.slice(start, batch)))
                    result.stored += stored
                    result.duplicates += dups
                bar.update(scanned)
    finally:
        publisher.close()
    return result
