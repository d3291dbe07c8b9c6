"""``toymb journal replay``: republish a topic's journaled messages into a broker topic.

Messages keep their ids, keys, headers, content types, bodies (byte for byte, as ``body_base64``)
and timestamps. A broker stores nothing for an id the topic already holds, so replaying into the
same topic, or replaying twice, is harmless.

Order: the journal's files are named ``part-<run>-<batch>-<n>``, and batches cover increasing
offsets of every partition, so reading batch after batch and sorting each batch by (partition,
offset) republishes every partition in its original order. Memory is bounded by one batch.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from driver import Template
from driver.errors import HTTPStatusError, TransportError

from .errors import ReplayError

COLUMNS = ["id", "partition", "offset", "key", "headers", "timestamp", "content_type", "body"]
RETRIES = 5


@dataclass
class ReplayResult:
    read: int = 0          # rows of the topic in the time range
    stored: int = 0        # newly stored by the broker
    duplicates: int = 0    # ids the target topic already held


def _date(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")


def journal_files(journal_dir: str | Path, topic: str, from_ts: int | None = None,
                  to_ts: int | None = None) -> list[Path]:
    """The topic's Parquet files whose date folder can hold rows in [from_ts, to_ts), in batch order."""
    root = Path(journal_dir) / f"topic={topic}"
    if not root.is_dir():
        return []
    low = _date(from_ts) if from_ts is not None else None
    high = _date(to_ts) if to_ts is not None else None
    files: list[Path] = []
    for folder in root.glob("date=*"):
        day = folder.name.split("=", 1)[1]
        if (low is not None and day < low) or (high is not None and day > high):
            continue
        files.extend(folder.glob("part-*.parquet"))
    return sorted(files, key=lambda f: (f.name, f.parent.name))


def _batch_key(path: Path) -> str:
    # part-<run>-<batch>-<n>.parquet -> "<run>-<batch>"
    return path.name.rsplit("-", 1)[0]


def read_batches(files: list[Path], from_ts: int | None, to_ts: int | None) -> Iterator[tuple[pa.Table, int]]:
    """Per journal batch: its rows in the time range sorted by (partition, offset), and the rows scanned."""
    for _key, group in groupby(files, key=_batch_key):
        tables, scanned = [], 0
        for path in group:
            table = pq.read_table(path, columns=COLUMNS)
            scanned += table.num_rows
            mask = None
            if from_ts is not None:
                mask = pc.greater_equal(table["timestamp"], from_ts)
            if to_ts is not None:
                upper = pc.less(table["timestamp"], to_ts)
                mask = upper if mask is None else pc.and_(mask, upper)
            tables.append(table if mask is None else table.filter(mask))
        merged = pa.concat_tables(tables).sort_by([("partition", "ascending"), ("offset", "ascending")])
        yield merged, scanned


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
           from_ts: int | None = None, to_ts: int | None = None, batch: int = 500,
           token: str | None = None, progress: bool | None = None) -> ReplayResult:
    """Republish ``topic``'s journaled messages with ``from_ts <= timestamp < to_ts`` to ``to_url``.

    Raises:
        ReplayError: the journal has no such topic, or the broker refused the messages.
    """
    files = journal_files(journal_dir, topic, from_ts, to_ts)
    if not files and not (Path(journal_dir) / f"topic={topic}").is_dir():
        raise ReplayError(f"the journal {journal_dir} holds no topic {topic!r}")
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    show = sys.stderr.isatty() if progress is None else progress
    result = ReplayResult()
    publisher = Publisher(to_url, to_topic or topic, token)
    try:
        with tqdm(total=total, unit="msg", disable=not show, desc=f"replay {topic}") as bar:
            for table, scanned in read_batches(files, from_ts, to_ts):
                result.read += table.num_rows
                for start in range(0, table.num_rows, batch):
                    stored, dups = publisher.send(to_messages(table.slice(start, batch)))
                    result.stored += stored
                    result.duplicates += dups
                bar.update(scanned)
    finally:
        publisher.close()
    return result
