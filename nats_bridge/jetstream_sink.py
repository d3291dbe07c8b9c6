"""The journal's JetStream sink: routes with ``routes.<n>.dest.nats.subject`` publish into JetStream.

Exactly once through JetStream's de-duplication: every message is published with
``Nats-Msg-Id: <topic>:<id>`` (a broker id is unique within its topic), and a micro-batch Spark
replays after a crash publishes the same ids again, which the stream drops as duplicates as long as
the replay comes within the stream's duplicate window (``duplicate_window``, 2 minutes by default).
A replay after the window stores a second copy: size the window above the longest outage of the
journal job. A batch is done only once every message got its PubAck, so Spark commits its offsets
after JetStream has the messages.

Headers: the message's own, plus ``jmsbridge.origin``, the hop count and the content type (as the
Kafka and JMS sinks). A subject no stream holds is a hard failure naming it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

import nats
from nats.errors import Error as NatsError
from nats.js.errors import Error as JetStreamError
from nats.js.errors import NoStreamResponseError

from journal_spark.bridges.sink import RouteSink
from journal_spark.bridges.telemetry import BridgeTelemetry
from journal_spark.routes import DataError, HardFailure, Routes, headers_for, hops_of, row_headers

log = logging.getLogger(__name__)
SINK_NAME = "jetstream"
WINDOW = 256            # publishes awaiting their PubAck at once
RETRIES = 30
RETRY_S = 1.0


def msg_id(row: Any) -> str:
    """The de-duplication id of a journaled message: ``<topic>:<id>``."""
    return f"{row['topic']}:{row['id']}"


class JetStreamSink(RouteSink):
    """The journal sink of every route whose destination is a JetStream subject."""

    name = SINK_NAME

    def __init__(self, routes: Routes, telemetry: BridgeTelemetry | None = None) -> None:
        super().__init__(routes, telemetry)
        settings = routes.settings
        self.servers = [s.strip() for s in settings.get("nats.servers", "nats://127.0.0.1:4222").split(",")]
        self.auth = {"user": settings.get("nats.user") or None, "password": settings.get("nats.password") or None,
                     "token": settings.get("nats.token") or None}
        asyncio.run(self._check_streams())

    async def _connect(self) -> Any:
        try:
            return await nats.connect(servers=self.servers, connect_timeout=5, max_reconnect_attempts=3,
                                      **self.auth)
        except (OSError, NatsError) as exc:
            raise HardFailure(f"JetStream sink: cannot connect to NATS at {','.join(self.servers)}: {exc}") from None

    async def _check_streams(self) -> None:
        nc = await self._connect()
        try:
            js = nc.jetstream()
            for route in self.routes.of_kind("jetstream"):
                try:
                    await js.find_stream_name_by_subject(route.destination.name)
                except JetStreamError:
                    raise HardFailure(f"route {route.name}: no JetStream stream holds the subject "
                                      f"{route.destination.name} (routes file {self.routes.path}); create one "
                                      "(the bridge does not create streams)") from None
        finally:
            await nc.close()

    # ------------------------------------------------------------------ Spark entry point
    def write_batch(self, df: Any, batch_id: int) -> None:
        """foreachBatch: publish the micro-batch's JetStream-routed rows; returns once all are acknowledged."""
        self.write_rows(df.toLocalIterator(prefetchPartitions=True), batch_id)

    def write_rows(self, rows: Iterable[Any], batch_id: int) -> int:
        """Publish ``rows`` routed to JetStream; returns how many (duplicates of a replay included)."""
        out: list[tuple[str, bytes, dict[str, str]]] = []
        looped = 0
        t0 = time.perf_counter()
        for row in rows:
            route = self.routes.first_match(row)
            if route is None or route.destination.kind != "jetstream":
                continue
            try:
                headers = row_headers(row)
                if headers.get("jmsbridge.origin") == self.routes.bridge_id or \
                        hops_of(headers) >= self.routes.max_hops:
                    looped += 1
                    continue
                bridged = headers_for(row, self.routes.bridge_id)
            except DataError as exc:
                if self.dead_letter_headers(row, route, exc, "nowhere (JetStream has no dead-letter here)") is None:
                    continue
                raise HardFailure(f"route {route.name}: routing.on-error=dead-letter is not supported for "
                                  "JetStream destinations") from None
            bridged["Nats-Msg-Id"] = msg_id(row)
            body = row["body"]
            out.append((route.destination.name, bytes(body) if body is not None else b"", bridged))
        if out:
            asyncio.run(self._publish_all(out, batch_id))
        self.telemetry.routed(self.name, len(out), time.perf_counter() - t0)
        if looped:
            self.telemetry.skipped(self.name, looped)
        return len(out)

    async def _publish_all(self, out: list[tuple[str, bytes, dict[str, str]]], batch_id: int) -> None:
        nc = await self._connect()
        try:
            js = nc.jetstream()
            for start in range(0, len(out), WINDOW):
                chunk = out[start:start + WINDOW]
                for attempt in range(RETRIES + 1):
                    try:
                        # Publishing again is harmless: the ids dedupe within the window.
                        await asyncio.gather(*(js.publish(subject, body, timeout=10, headers=headers)
                                               for subject, body, headers in chunk))
                        break
                    except NoStreamResponseError:
                        raise HardFailure(f"batch {batch_id}: no JetStream stream answers for "
                                          f"{chunk[0][0]}") from None
                    except (NatsError, JetStreamError, OSError) as exc:
                        self.telemetry.failed(self.name, "connection")
                        if attempt >= RETRIES:
                            raise HardFailure(f"JetStream sink: batch {batch_id} not acknowledged after "
                                              f"{RETRIES} retries: {exc}") from None
                        log.warning("JetStream sink: %s; retrying in %.1fs", exc or type(exc).__name__, RETRY_S)
                        await asyncio.sleep(RETRY_S)
        finally:
            try:
                await nc.close()
            except (OSError, NatsError):
                pass
