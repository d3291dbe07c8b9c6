"""The JMS egress sink: routes whose destination is ``dest.jms.queue`` or ``dest.jms.topic``.

Exactly once, across crashes at any point, without XA:

- Rows go out in STOMP transactions of at most ``jms.egress.chunk`` messages (default 1000). Each
  transaction holds the messages, a *marker* message sent to the marker queue
  ``toymb.bridge.<bridge.id>.jms.markers``, and the acknowledgement of the previous marker. The
  marker's body says, per broker topic and partition, the next store offset not yet exported
  (``{"batch": 7, "next": {"orders": {"3": 120}}}``). So the queue always holds exactly one
  marker, and it changes in the same ActiveMQ transaction as the messages it accounts for. The
  sink's own subscription receives each committed marker back; it waits for it only in the next
  transaction, just before that one's ACK (ActiveMQ delivered it some 40 ms after the COMMIT's
  receipt: a wait per transaction when taken straight away).
- A crash before the COMMIT loses the connection, so ActiveMQ rolls the transaction back (the
  old marker comes back). A crash after it leaves the new marker.
- Whenever the sink (re)connects it browses the marker queue to its end, takes the marker (held,
  unacknowledged, by its own subscription) and drops every row below it. A replayed micro-batch,
  a half-sent one (crash between two chunks) or a batch re-read from a lost checkpoint therefore
  exports nothing twice, and the rest once.

A lost connection (ActiveMQ restarted) is retried ``jms.egress.retries`` times (default 30; -1:
forever, as Artemis's max-retries), every ``jms.egress.retry.ms`` (default 2000), from the marker;
then the batch fails and so does the job.

One sink per JMS connection (``routes.<n>.jms.connection``; the ``jms.stomp.*`` one is
``default``), each with its own Spark query, checkpoint (``jms`` for the default connection,
``jms.<name>`` for the others) and marker queue on its own server, so routes to two ActiveMQ
servers are each exactly once.

Pause and resume: with ``jms.egress.management.port`` the journal serves the same management API
as ``toymb journal jms-ingress`` (:mod:`.manage`) for its JMS sinks. A paused sink holds its
micro-batch (nothing more is sent; the rows wait in the store) until resumed; ``stop`` pauses
and closes the connection, ``start`` resumes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..bridges.sink import RouteSink
from ..bridges.telemetry import BridgeTelemetry
from ..header_names import find_header
from ..routes import DataError, HardFailure, Route, Routes, headers_for
from .config import DEFAULT_CONNECTION, stomp_settings
from .errors import JmsConnectionError
from .mapping import OutFrame, to_stomp
from .stompclient import StompClient

log = logging.getLogger(__name__)

SINK_NAME = "jms"
Done = dict[str, dict[int, int]]     # broker topic -> partition -> next offset not yet exported
MARKER_WAIT_S = 30.0


def connection_of(route: Route) -> str:
    """The JMS connection a route sends through (``default``: the ``jms.stomp.*`` one)."""
    return route.options.get("jms.connection", DEFAULT_CONNECTION).strip() or DEFAULT_CONNECTION


def destination_of(route: Route) -> str:
    kind = "queue" if route.destination.kind == "jms-queue" else "topic"
    return f"/{kind}/{route.destination.name}"


class JmsSink(RouteSink):
    """The journal sink of the routes with a JMS destination on one connection (one STOMP connection)."""

    name = SINK_NAME

    def __init__(self, routes: Routes, telemetry: BridgeTelemetry | None = None,
                 connection: str = DEFAULT_CONNECTION) -> None:
        super().__init__(routes, telemetry)
        self.connection = connection
        self.stomp = stomp_settings(routes.settings, connection)
        if connection != DEFAULT_CONNECTION:
            self.name = f"{SINK_NAME}.{connection}"
        settings = routes.settings
        self.chunk = max(1, _setting_int(settings, "jms.egress.chunk", 1000))
        self.retries = _setting_int(settings, "jms.egress.retries", 30)
        if self.retries < -1:
            raise HardFailure(f"jms.egress.retries must be -1 (forever), 0 or more, not {self.retries}")
        self.retry_s = max(1, _setting_int(settings, "jms.egress.retry.ms", 2000)) / 1000
        suffix = "" if connection == DEFAULT_CONNECTION else f".{connection}"
        self.marker_queue = f"/queue/toymb.bridge.{routes.bridge_id}.jms{suffix}.markers"
        self.client: StompClient | None = None
        self.done: Done = {}
        self.held: list[str] = []          # ack ids of the marker message(s) this connection holds
        self.awaited: bytes | None = None  # body of the marker committed last, not yet received back
        self._tx = 0
        self._running = threading.Event()
        self._running.set()
        self.state = "STARTED"
        self.message_count = 0
        self.last_error: str | None = None

    # ------------------------------------------------------------------ management (.manage)
    def pause(self) -> None:
        """Hold the next chunk until :meth:`resume` (the chunk in flight completes)."""
        self._running.clear()
        self.state = "PAUSED"

    def resume(self) -> None:
        self.state = "STARTED"
        self._running.set()

    def halt(self) -> None:
        """Pause, and close the connection once the chunk in flight is done (at the next wait)."""
        self.pause()
        self.state = "STOPPED"

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "jms-egress", "state": self.state, "failed": False,
                "message_count": self.message_count, "last_error": self.last_error,
                "parameters": {"connection": self.connection, "url": self.stomp.url,
                               "marker_queue": self.marker_queue, "chunk": self.chunk,
                               "retries": self.retries, "retry_ms": int(self.retry_s * 1000),
                               "routes": [r.name for r in self.routes.of_kind("jms-queue", "jms-topic")
                                          if connection_of(r) == self.connection]}}

    def _wait_while_paused(self) -> None:
        if self._running.is_set():
            return
        log.info("JMS egress %s paused", self.name)
        while not self._running.wait(0.5):
            if self.state == "STOPPED" and self.client is not None:
                self.close()
        log.info("JMS egress %s resumed", self.name)

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
            self._wait_while_paused()
            sent += self._with_retries(list(pending), batch_id)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # ------------------------------------------------------------------------- internals
    def _with_retries(self, rows: list[Any], batch_id: int) -> int:
        attempt = 0
        while True:
            try:
                if self.client is None:
                    self._connect()
                sent = self._export(rows, batch_id)
                self.message_count += sent
                return sent
            except JmsConnectionError as exc:
                self.close()
                self.last_error = str(exc)
                self.telemetry.failed(self.name, "connection")
                if self.retries != -1 and attempt >= self.retries:
                    raise HardFailure(f"JMS bridge {self.routes.bridge_id}: {exc} "
                                      f"(gave up after {self.retries} retries)") from None
                attempt += 1
                log.warning("JMS egress %s: %s; reconnecting in %.1fs (%d/%s)", self.name, exc, self.retry_s,
                            attempt, "forever" if self.retries == -1 else self.retries)
                time.sleep(self.retry_s)

    def _connect(self) -> None:
        """Connect, and take the marker: browse the queue to its end, then receive what was there."""
        client = StompClient(self.stomp.url, **self.stomp.client_options()).connect()
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
        self.client, self.done, self.held, self.awaited = client, done, held, None
        log.info(
            "JMS egress connected to %s; resuming after the marker of %d topic(s)", self.stomp.url, len(done)
        )

    def _export(self, rows: list[Any], batch_id: int) -> int:
        client = self.client
        assert client is not None
        touched: Done = {}
        fresh: list[Any] = []
        for row in rows:
            topic, partition, offset = row["topic"], int(row["partition"]), int(row["offset"])
            if offset < self.done.get(topic, {}).get(partition, 0):
                continue                       # committed by an earlier transaction
            seen = touched.setdefault(topic, {})
            seen[partition] = max(seen.get(partition, 0), offset + 1)
            fresh.append(row)
        if not touched:
            return 0
        merged: Done = {t: dict(p) for t, p in self.done.items()}
        _merge(merged, touched)
        self._tx += 1
        tx = f"toymb-{batch_id}-{self._tx}"
        marker = json.dumps({"batch": batch_id, "next": merged}, separators=(",", ":")).encode()
        counts = _Counts()
        client.begin(tx)
        try:
            # Rows are converted while the frames before them are on their way: ActiveMQ works on
            # the first ones meanwhile (converting them all before the BEGIN left it idle).
            sent = client.send_many(self._frames(fresh, counts), tx)
        except BaseException:
            self.close()                       # with the connection, ActiveMQ rolls the transaction back
            raise
        if self.awaited is not None:      # delivered meanwhile, most likely
            self._take_new_marker(client, self.awaited)
        for ack in self.held:
            client.ack(ack, transaction=tx)
        # The marker goes last, with a receipt. ActiveMQ answers a SEND or ACK it refuses with an
        # ERROR frame but keeps the connection, and would COMMIT the rest, marker included: past a
        # message never queued. It answers frames in order, so the receipt (without an ERROR
        # before it) proves that nothing of the transaction was refused.
        client.send(self.marker_queue, marker, {"persistent": "true", "content-length": str(len(marker))},
                    transaction=tx, receipt=True)
        client.commit(tx)
        self.done, self.held, self.awaited = merged, [], marker
        self.telemetry.routed(self.name, sent, counts.seconds)
        log.debug("batch %d: %d message(s) to JMS, %d failure(s)", batch_id, sent, counts.failures)
        return sent

    def _frames(self, rows: list[Any], counts: _Counts) -> Iterator[tuple[str, bytes, dict[str, str]]]:
        """(destination, body, headers) of each row's SEND on this connection, or of its dead letter."""
        for row in rows:
            t0 = time.perf_counter()
            route = self.routes.first_match(row)
            if (route is None or route.destination.kind not in ("jms-queue", "jms-topic")
                    or connection_of(route) != self.connection):
                continue
            out: tuple[str, OutFrame] | None
            try:
                if self.skip_reason(row, route, self.stomp.system) is not None:
                    continue
                out = (destination_of(route), self._frame(route, row))
            except DataError as exc:
                counts.failures += 1
                out = self._soft_failure(row, route, exc)
            counts.seconds += time.perf_counter() - t0
            if out is not None:
                yield out[0], out[1].body, out[1].headers

    def _take_new_marker(self, client: StompClient, body: bytes) -> None:
        """Receive the marker the last transaction committed, to acknowledge it in this one."""
        deadline = time.monotonic() + MARKER_WAIT_S
        while True:
            frame = client.receive(deadline - time.monotonic())
            if frame is not None and frame.body == body:
                self.held = [frame.headers["ack"]]
                return
            if frame is None and time.monotonic() >= deadline:
                raise JmsConnectionError("the committed marker was not delivered back within "
                                         f"{MARKER_WAIT_S:.0f}s")

    def _frame(self, route: Route, row: Any) -> OutFrame:
        headers = headers_for(row, self.routes.bridge_id)
        opts = route.options
        if "jms.persistent" in opts and find_header(headers, "DeliveryMode") is None:
            headers["jms.DeliveryMode"] = (
                "PERSISTENT" if opts["jms.persistent"] == "true" else "NON_PERSISTENT"
            )
        if "jms.priority" in opts and find_header(headers, "Priority") is None:
            headers["jms.Priority"] = opts["jms.priority"]
        if "jms.ttl.ms" in opts and find_header(headers, "Expiration") is None:
            headers["jms.Expiration"] = str(int(time.time() * 1000) + int(opts["jms.ttl.ms"]))
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


@dataclass(slots=True)
class _Counts:
    """What converting a transaction's rows took: failures (dead letters or skips), seconds."""

    failures: int = 0
    seconds: float = 0.0


def _merge(into: Done, more: dict[str, Any]) -> None:
    for topic, parts in more.items():
        target = into.setdefault(topic, {})
        for partition, nxt in parts.items():
            p = int(partition)
            target[p] = max(target.get(p, 0), int(nxt))


def _setting_int(settings: dict[str, str], key: str, default: int) -> int:
    try:
        return int(settings.get(key, str(default)).strip())
    except ValueError:
        raise HardFailure(f"{key} must be an integer, not {settings[key]!r}") from None


class EgressControl:
    """A :class:`JmsSink` as :mod:`.manage` sees a bridge (``start`` is the sink's start position)."""

    def __init__(self, sink: JmsSink) -> None:
        self.sink = sink

    def start(self) -> None:
        self.sink.resume()

    def stop(self) -> None:
        self.sink.halt()

    def pause(self) -> None:
        self.sink.pause()

    def resume(self) -> None:
        self.sink.resume()

    def status(self) -> dict[str, Any]:
        return self.sink.status()
