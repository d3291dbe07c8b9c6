"""The JMS egress sink: routes whose destination is ``dest.jms.queue`` or ``dest.jms.topic``.

Exactly once, across crashes at any point, without XA:

- Rows go out in STOMP transactions of at most ``jms.egress.chunk`` messages (default 1000). Each
  transaction holds the messages, a *marker* message sent to the marker queue
  ``toymb.bridge.<bridge.id>.jms.markers``, and the acknowledgement of the previous marker. The
  marker's body says, per broker topic and partition, the next store offset not yet exported
  (``{"batch": 7, "next": {"orders": {"3": 120}}}``). So the queue always holds exactly one
  marker, and it changes in the same ActiveMQ transaction as the messages it accounts for.
- A crash before the COMMIT loses the connection, so ActiveMQ rolls the transaction back (the
  old marker comes back). A crash after it leaves the new marker.
- Whenever the sink (re)connects it browses the marker queue to its end, takes the marker (held,
  unacknowledged, by its own subscription) and drops every row below it. A replayed micro-batch,
  a half-sent one (crash between two chunks) or a batch re-read from a lost checkpoint therefore
  exports nothing twice, and the rest once.

A lost connection (ActiveMQ restarted) is retried ``jms.egress.retries`` times (default 30), every
``jms.egress.retry.ms`` (default 2000), from the marker; then the batch fails and so does the job.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from ..bridges.sink import RouteSink
from ..bridges.telemetry import BridgeTelemetry
from ..routes import DataError, HardFailure, Route, Routes, headers_for, hops_of, row_headers
from .config import stomp_settings
from .errors import JmsConnectionError
from .mapping import OutFrame, to_stomp
from .stompclient import StompClient

log = logging.getLogger(__name__)

SINK_NAME = "jms"
Done = dict[str, dict[int, int]]     # broker topic -> partition -> next offset not yet exported
MARKER_WAIT_S = 30.0


def destination_of(route: Route) -> str:
    kind = "queue" if route.destination.kind == "jms-queue" else "topic"
    return f"/{kind}/{route.destination.name}"


class JmsSink(RouteSink):
    """The journal sink of every route with a JMS destination (one STOMP connection)."""

    name = SINK_NAME

    def __init__(self, routes: Routes, telemetry: BridgeTelemetry | None = None) -> None:
        super().__init__(routes, telemetry)
        self.stomp = stomp_settings(routes.settings)
        settings = routes.settings
        self.chunk = max(1, int(settings.get("jms.egress.chunk", "1000")))
        self.retries = max(0, int(settings.get("jms.egress.retries", "30")))
        self.retry_s = max(1, int(settings.get("jms.egress.retry.ms", "2000"))) / 1000
        self.marker_queue = f"/queue/toymb.bridge.{routes.bridge_id}.jms.markers"
        self.client: StompClient | None = None
        self.done: Done = {}
        self.held: list[str] = []          # ack ids of the marker message(s) this connection holds
        self._tx = 0

    # ------------------------------------------------------------------ Spark entry point
    def write_batch(self, df: Any, batch_id: int) -> None:
        """foreachBatch: export the micro-batch's JMS-routed rows exactly once."""
        self.write_rows(df.toLocalIterator(prefetchPartitions=True), batch_id)

    def write_rows(self, rows: Iterable[Any], batch_id: int) -> int:
        """Export ``rows`` (envelope columns, offsets ascending per partition); returns messages sent.

        Rows are consumed lazily and sent in chunks, so memory stays bounded by one chunk.
        """
        iterator = iter(rows)
        pending: list[Any] = []
        sent = 0
        while True:
            pending.clear()
            for row in iterator:
                pending.append(row)
                if len(pending) >= self.chunk:
                    break
            if not pending:
                return sent
            sent += self._with_retries(list(pending), batch_id)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # ------------------------------------------------------------------------- internals
    def _with_retries(self, rows: list[Any], batch_id: int) -> int:
        for attempt in range(self.retries + 1):
            try:
                if self.client is None:
                    self._connect()
                return self._export(rows, batch_id)
            except JmsConnectionError as exc:
                self.close()
                self.telemetry.failed(self.name, "connection")
                if attempt >= self.retries:
                    raise HardFailure(f"JMS bridge {self.routes.bridge_id}: {exc} "
                                      f"(gave up after {self.retries} retries)") from None
                log.warning("JMS egress: %s; reconnecting in %.1fs (%d/%d)", exc, self.retry_s, attempt + 1,
                            self.retries)
                time.sleep(self.retry_s)
        raise AssertionError("unreachable")

    def _connect(self) -> None:
        """Connect, and take the marker: browse the queue to its end, then receive what was there."""
        client = StompClient(self.stomp.url, user=self.stomp.user, password=self.stomp.password).connect()
        try:
            present = client.browse(self.marker_queue, timeout=MARKER_WAIT_S)
            client.subscribe(self.marker_queue, "markers", ack="client-individual",
                             headers={"activemq.prefetchSize": "100"})
            wanted = {f.headers.get("message-id") for f in present}
            done: Done = {}
            held: list[str] = []
            deadline = time.monotonic() + MARKER_WAIT_S
            while wanted:
                frame = client.receive(deadline - time.monotonic())
                if frame is None:
                    if time.monotonic() >= deadline:
                        raise JmsConnectionError(f"the marker(s) in {self.marker_queue} were not delivered "
                                                 f"within {MARKER_WAIT_S:.0f}s (held by another connection?)")
                    continue
                wanted.discard(frame.headers.get("message-id"))
                held.append(frame.headers["ack"])
                _merge(done, json.loads(frame.body)["next"])
        except BaseException:
            client.close()
            raise
        self.client, self.done, self.held = client, done, held
        log.info(
            "JMS egress connected to %s; resuming after the marker of %d topic(s)", self.stomp.url, len(done)
        )

    def _export(self, rows: list[Any], batch_id: int) -> int:
        client = self.client
        assert client is not None
        touched: Done = {}
        frames: list[tuple[str, OutFrame]] = []
        looped = failures = 0
        t0 = time.perf_counter()
        for row in rows:
            topic, partition, offset = row["topic"], int(row["partition"]), int(row["offset"])
            if offset < self.done.get(topic, {}).get(partition, 0):
                continue                       # committed by an earlier transaction
            seen = touched.setdefault(topic, {})
            seen[partition] = max(seen.get(partition, 0), offset + 1)
            route = self.routes.first_match(row)
            if route is None or route.destination.kind not in ("jms-queue", "jms-topic"):
                continue
            try:
                if not self._should_export(row):
                    looped += 1
                    continue
                frames.append((destination_of(route), self._frame(route, row)))
            except DataError as exc:
                failures += 1
                letter = self._soft_failure(row, route, exc)
                if letter is not None:
                    frames.append(letter)
        seconds = time.perf_counter() - t0
        if not touched:
            return 0
        merged: Done = {t: dict(p) for t, p in self.done.items()}
        _merge(merged, touched)
        self._tx += 1
        tx = f"toymb-{batch_id}-{self._tx}"
        marker = json.dumps({"batch": batch_id, "next": merged}, separators=(",", ":")).encode()
        client.begin(tx)
        for destination, frame in frames:
            client.send(destination, frame.body, frame.headers, transaction=tx)
        client.send(self.marker_queue, marker, {"persistent": "true", "content-length": str(len(marker))},
                    transaction=tx)
        for ack in self.held:
            client.ack(ack, transaction=tx)
        client.commit(tx)
        self.done, self.held = merged, []
        self._take_new_marker(client, marker)
        self.telemetry.routed(self.name, len(frames), seconds)
        if looped:
            self.telemetry.skipped(self.name, looped)
        log.debug("batch %d: %d message(s) to JMS, %d failure(s), %d looped", batch_id, len(frames), failures,
                  looped)
        return len(frames)

    def _take_new_marker(self, client: StompClient, body: bytes) -> None:
        """Receive the marker just committed, to acknowledge it in the next transaction."""
        deadline = time.monotonic() + MARKER_WAIT_S
        while True:
            frame = client.receive(deadline - time.monotonic())
            if frame is not None and frame.body == body:
                self.held = [frame.headers["ack"]]
                return
            if frame is None and time.monotonic() >= deadline:
                raise JmsConnectionError("the committed marker was not delivered back within "
                                         f"{MARKER_WAIT_S:.0f}s")

    def _should_export(self, row: Any) -> bool:
        headers = row_headers(row)
        if headers.get("jmsbridge.origin") == self.routes.bridge_id:
            return False
        return hops_of(headers) < self.routes.max_hops

    def _frame(self, route: Route, row: Any) -> OutFrame:
        headers = headers_for(row, self.routes.bridge_id)
        opts = route.options
        if "jms.persistent" in opts and "jms.JMSDeliveryMode" not in headers:
            headers["jms.JMSDeliveryMode"] = (
                "PERSISTENT" if opts["jms.persistent"] == "true" else "NON_PERSISTENT"
            )
        if "jms.priority" in opts and "jms.JMSPriority" not in headers:
            headers["jms.JMSPriority"] = opts["jms.priority"]
        if "jms.ttl.ms" in opts and "jms.JMSExpiration" not in headers:
            headers["jms.JMSExpiration"] = str(int(time.time() * 1000) + int(opts["jms.ttl.ms"]))
        key = route.key_for(row) if route.conv_key else row["key"]
        body = row["body"]
        return to_stomp(key, headers, str(row["content_type"]), bytes(body) if body is not None else b"")

    def _soft_failure(self, row: Any, route: Route, exc: DataError) -> tuple[str, OutFrame] | None:
        """``routing.on-error``: raise (fail), None (skip), or the dead letter to send in the transaction."""
        headers = self.dead_letter_headers(row, route, exc, f"the JMS queue {self.routes.dead_letter_topic}")
        if headers is None:
            return None
        headers.pop("jmsbridge.hops", None)
        body = row["body"]
        return (f"/queue/{self.routes.dead_letter_topic}",
                to_stomp(None, headers, "application/octet-stream", bytes(body) if body is not None else b""))


def _merge(into: Done, more: dict[str, Any]) -> None:
    for topic, parts in more.items():
        target = into.setdefault(topic, {})
        for partition, nxt in parts.items():
            p = int(partition)
            target[p] = max(target.get(p, 0), int(nxt))
