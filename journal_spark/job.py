"""The journal job: one Spark streaming query per sink, all over the same store source.

Each sink (the Parquet journal first; the Kafka and JMS bridges later) gets its own query and its
own checkpoint folder ``<checkpoint_dir>/<sink.name>``, so a slow or failing bridge never holds
back the journal, and each one's offsets say exactly what *it* has made durable.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from broker.config import Settings
from broker.store import MEMORY_SCHEME, JournalRepository, Store
from broker.store.journal import JournalStore

from .errors import JavaMissing, JournalFailed, PortInUse, UnsharedStore
from .lease import JournalLease
from .metrics import JournalMetrics
from .python_workers import restore_python, with_session_python
from .scratch import ScratchFolder, session_conf, session_env

log = logging.getLogger(__name__)


class Sink(Protocol):
    """A destination of the journal's micro-batches.

    ``write_batch`` must be idempotent per ``batch_id``: Spark calls it again with the same id and
    the same rows after a crash. ``start`` is where a brand-new checkpoint begins:
    ``journaled`` (what the journal table holds), ``earliest`` or ``latest``. An ``ordered``
    sink gets each Spark task's rows in (topic, partition, offset) order.
    """

    name: str
    start: str
    ordered: bool

    def write_batch(self, df: Any, batch_id: int) -> None: ...

    def close(self) -> None:
        """Release the sink's clients once its query has stopped."""


def check_java() -> str:
    """The java executable Spark will use, or :class:`JavaMissing` saying how to fix it."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
        raise JavaMissing(f"JAVA_HOME is {java_home!r} but {candidate} does not exist; "
                          "point JAVA_HOME at a Java 17+ runtime or unset it")
    found = shutil.which("java")
    if found:
        return found
    raise JavaMissing("the journal runs on Apache Spark, which needs Java 17 or newer: `java` is not on PATH "
                      "and JAVA_HOME is not set (on Debian: apt-get install openjdk-17-jre-headless)")


def check_store(url: str) -> None:
    """Refuse a store the journal cannot read: Spark reads it from other processes than the node's.

    Raises:
        UnsharedStore: ``url`` is ``memory://``, a database that lives inside one node's process.
    """
    if url.startswith(MEMORY_SCHEME):
        raise UnsharedStore(f"the journal cannot read the store {url!r}: a memory:// store lives inside its "
                            "node's process and the journal reads from its own (Spark's); give the node and "
                            "the journal a sqlite://, postgresql:// or mysql:// database_url")


def _with_task_retries(master: str) -> str:
    """``local[N]`` as ``local[N,4]``: local mode otherwise fails a batch on the first task failure.

    Every sink is idempotent per batch, so retrying a task is safe, and one failed attempt (a
    Python worker that died with its machine overloaded, say) need not fail the whole query.
    """
    match = re.fullmatch(r"local(?:\[([^,\]]+)\])?", master)
    if match is None:
        return master
    return f"local[{match.group(1) or '1'},4]"


def build_session(master: str, app_name: str = "toymb-journal", scratch: ScratchFolder | None = None) -> Any:
    """A quiet SparkSession (WARN logs, no UI, UTC dates) with the ``toymb`` source and the
    journal's SQL functions (:func:`.schema.register_functions`) registered.

    Its temporary files go to ``scratch`` (by default a folder claimed in the user's cache and
    released when this process exits), never /tmp or the cwd: see :mod:`.scratch`.
    """
    check_java()
    if scratch is None:
        scratch = ScratchFolder.claim()
        atexit.register(scratch.release)   # registered before Spark's own hooks, so it runs after them
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from .schema import register_functions
    from .source import StoreDataSource

    _without_numpy_converter()
    builder = (SparkSession.builder.master(_with_task_retries(master)).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4")
               # A bounded heap: the default is a quarter of the machine's memory.
               .config("spark.driver.memory", os.environ.get("TOYMB_SPARK_DRIVER_MEMORY", "1g"))
               .config("spark.sql.streaming.stopTimeout", "10s")
               .config("spark.sql.adaptive.enabled", "false")   # streaming ignores it, with a warning
               .config("spark.sql.parquet.compression.codec", "snappy"))
    for key, value in session_conf(scratch.path).items():
        builder = builder.config(key, value)
    builder = with_delta(builder)
    if master.startswith("local") or _on_loopback(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # loopback only, and no warning about it
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    if not master.startswith("local"):
        # Executors must fit the workers (services/spark.sh gives each 768 MiB); Spark asks 1 GiB.
        builder = builder.config("spark.executor.memory", os.environ.get("TOYMB_SPARK_EXECUTOR_MEMORY", "512m"))
    logging.getLogger("py4j").setLevel(logging.WARNING)   # one INFO line per callback otherwise
    # Spark's Python workers need this interpreter (pyarrow, the toymb packages), not python3, and
    # in local mode they import the installed pyspark rather than compile its source zip each time.
    previous, _ = with_session_python(master)
    try:
        with _launch_env(session_env(scratch.path)):
            spark = builder.getOrCreate()
    finally:
        restore_python(previous)
    spark.sparkContext.setLogLevel("WARN")
    # "Current batch is falling behind": a backlog drained in big batches is not a fault. Spark 4.2
    # moved the class into the .runtime package; the old name is kept for older Sparks.
    for name in ("org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
                 "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor"):
        _quiet(spark, name)
    spark.dataSource.register(StoreDataSource)
    register_functions(spark)
    return spark


def _without_numpy_converter() -> None:
    """Take pyspark's numpy converters out of py4j's input converters.

    py4j asks every input converter about every argument of every call to the JVM, and their first
    answer imports ``pyspark.testing.utils`` to learn whether numpy is installed: that module
    imports pandas, pyarrow's pandas support and more, about 1.8 CPU-s of every job's start on this
    project's 2-core machine. The journal never hands a numpy array to the JVM.
    """
    from py4j import protocol
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    numpy = (NumpyArrayConverter, NumpyScalarConverter)
    protocol.INPUT_CONVERTER[:] = [c for c in protocol.INPUT_CONVERTER if not isinstance(c, numpy)]


@contextlib.contextmanager
def _launch_env(changes: dict[str, str]) -> Iterator[None]:
    """This process's environment with ``changes`` while Spark's JVM starts (it and every process it
    starts inherit them), as it was afterwards; this process's own temporary folder stays as it was."""
    previous, cached = {name: os.environ.get(name) for name in changes}, tempfile.tempdir
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = cached


def _on_loopback(master: str) -> bool:
    """A ``spark://`` master on this machine's loopback (services/spark.sh's cluster)."""
    match = re.match(r"spark://([^:/]+)", master)
    return match is not None and match.group(1) in ("127.0.0.1", "localhost")


def with_delta(builder: Any) -> Any:
    """``builder`` with Delta Lake's jars and SQL extension, tuned for small, frequent commits."""
    from .delta_jars import journal_jars
    from .table import COMMIT_CHECKPOINT_INTERVAL, STATS_COLUMNS

    return (builder.config("spark.jars", ",".join(journal_jars()))
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            # Per-batch cost: rebuilding the table's state ran 50 tasks (the default partitions)
            # each time the log is read. The journal's log is small: one task replays it. Against
            # two, a 3,000-row micro-batch's task CPU was 20-30% lower and its whole CPU 5-18%
            # lower (back-to-back runs on a shared 2-core machine).
            .config("spark.databricks.delta.snapshotPartitions", "1")
            .config("spark.databricks.delta.properties.defaults.dataSkippingStatsColumns", STATS_COLUMNS)
            # Delta's writers never checkpoint the log inside a commit: that rebuilt the table's
            # state in the commit every 50 (1.4 to 3.6 s, and as much again in the next one,
            # measured). The sink checkpoints off the commit path instead (table.DeltaSink).
            .config("spark.databricks.delta.properties.defaults.checkpointInterval", COMMIT_CHECKPOINT_INTERVAL)
            .config("spark.databricks.delta.stalenessLimit", "0")
            # The .crc file after each commit (computed from the previous one's, about 0.04 CPU-s
            # per commit): when Spark's log reader takes up a new checkpoint, it reads the
            # table's protocol and metadata from it rather than with a Spark job over the
            # checkpoint (2 CPU-s per checkpoint without it, measured).
            .config("spark.databricks.delta.writeChecksumFile.enabled", "true"))


def _quiet(spark: Any, logger: str) -> None:
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.ERROR
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, level)
    except Exception:  # noqa: BLE001 - only log noise is at stake
        log.debug("cannot quiet %s", logger)


def build_sinks(settings: Settings, spark: Any, store: JournalRepository | None, metrics: JournalMetrics,
                epoch: Callable[[], int] = lambda: 0) -> list[Sink]:
    """The Delta journal table, then the bridge sinks a routes file asks for."""
    from .table import DeltaSink

    def on_batch(rows: int, _batch_id: int, replayed: bool) -> None:
        metrics.rows.inc(rows)
        if replayed:
            metrics.batches.labels(DeltaSink.name, "skipped_rerun").inc()

    sinks: list[Sink] = [DeltaSink(settings.effective_journal_dir, settings.effective_checkpoint_dir, store,
                                   epoch=epoch, on_batch=on_batch)]
    if settings.routes:
        # Bridges (Kafka, JMS) live in journal_spark.bridges; their telemetry joins our registry.
        # A build without that module accepts a routes file and ignores it (journal only).
        try:
            from . import bridges
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.bridges":
                raise
            log.warning("routes file %s given, but this build has no bridge module: journaling only",
                        settings.routes)
        else:
            sinks.extend(bridges.build_sinks(settings, spark, metrics))
    return sinks


def _measured(sink: Sink, metrics: JournalMetrics) -> Callable[[Any, int], None]:
    def write(df: Any, batch_id: int) -> None:
        with metrics.batch_seconds.labels(sink.name).time():
            sink.write_batch(df, batch_id)
        metrics.batches.labels(sink.name, "written").inc()

    return write


def journal_stream(spark: Any, store_url: str, query_checkpoint: Path, sink: Sink, *, max_rows: int,
                   write: Callable[[Any, int], None] | None = None) -> Any:
    """A stream writer (trigger not set yet) feeding ``sink``'s micro-batches, checkpointed at ``query_checkpoint``.

    The store source only plans the batches; each batch's rows are read in the JVM by Spark's
    JDBC reader (:mod:`.batch_rows`) and handed to ``write`` (default ``sink.write_batch``).
    """
    from .batch_rows import BatchReader
    from .source import register_private_format

    reader = BatchReader(spark, store_url, query_checkpoint, tasks=spark.sparkContext.defaultParallelism,
                         ordered=getattr(sink, "ordered", False))
    deliver = write or sink.write_batch

    def on_batch(_planned: Any, batch_id: int) -> None:
        deliver(reader.read(batch_id), batch_id)

    stream = (spark.readStream.format(register_private_format(spark, sink.name))
              .option("url", store_url)
              .option("max_rows", str(max_rows))
              .option("start", getattr(sink, "start", "journaled"))
              .option("plan_only", "true")
              .option("checkpoint", str(query_checkpoint))
              .load())
    return (stream.writeStream.queryName(f"toymb-{sink.name}")
            .option("checkpointLocation", str(query_checkpoint)).foreachBatch(on_batch))


def start_query(spark: Any, settings: Settings, sink: Sink, metrics: JournalMetrics, *, once: bool) -> Any:
    """Start the streaming query feeding ``sink``; its checkpoint is ``<checkpoint_dir>/<sink.name>``."""
    writer = journal_stream(spark, settings.effective_database_url,
                            Path(settings.effective_checkpoint_dir).resolve() / sink.name, sink,
                            max_rows=settings.journal_max_rows, write=_measured(sink, metrics))
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.journal_trigger_ms} milliseconds")
    return writer.start()


def run(settings: Settings, *, once: bool = False, stop: threading.Event | None = None) -> int:
    """Run the journal until stopped (SIGTERM/SIGINT, or ``stop`` set), or until drained with ``once``.

    Raises:
        UnsharedStore: the store is ``memory://``, which the journal's processes cannot see.
        JavaMissing: no Java runtime.
        PortInUse: the /metrics port is taken.
        JournalFailed: a query died; its error is in the message.
    """
    check_store(settings.effective_database_url)
    check_java()
    scratch = ScratchFolder.claim(settings.journal_tmp_dir or None)
    atexit.register(scratch.release)   # the early returns and raises below
    store = Store(settings.effective_database_url)
    store.create_schema()   # the journal may start before any node has created the tables
    store.dispose()
    journal = JournalStore(settings.effective_database_url, pooled=False)
    metrics = JournalMetrics(journal)
    try:
        port = metrics.serve(settings.host, settings.journal_metrics_port)
    except OSError as exc:
        journal.dispose()
        raise PortInUse(f"cannot serve the journal's /metrics on {settings.host}:{settings.journal_metrics_port}: "
                        f"{exc.strerror}; a second journal process on this machine (a standby) needs a "
                        "--metrics-port of its own, or 0") from None
    if port:
        log.info("journal metrics on http://%s:%d/metrics", settings.host, port)
    stopping = stop or threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping the journal after the current batch", signum)
        stopping.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():   # signals reach the main thread only
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    from pyspark.errors import StreamingQueryException

    lease = JournalLease(settings.effective_database_url, settings.journal_lease_ms)
    # A standby starts Spark before it has the lease: taking over then costs no JVM start.
    spark = build_session(settings.spark_master, scratch=scratch)
    queries: list[Any] = []
    sinks: list[Sink] = []
    held = False
    try:
        if not lease.wait_acquire(stopping):
            return 0
        held = True
        lease.keep(lambda: _halt_now(spark, "lost the journal lease"), stopping)
        sinks = build_sinks(settings, spark, journal, metrics, epoch=lambda: lease.epoch)
        for sink in sinks:
            queries.append(start_query(spark, settings, sink, metrics, once=once))
        log.info("journaling %s into %s (checkpoints %s, %s)", store.dialect, settings.effective_journal_dir,
                 settings.effective_checkpoint_dir, "until drained" if once else "until stopped")
        restarts = [0] * len(queries)
        while not stopping.is_set() and any(q.isActive for q in queries):
            for i, query in enumerate(queries):
                try:
                    query.awaitTermination(0.5)
                except StreamingQueryException:
                    pass  # the same error is query.exception(), looked at next
                error = None if query.isActive else query.exception()
                transient = None if error is None else _spark_transient(error)
                if transient is not None and restarts[i] < MAX_TRANSIENT_RESTARTS:
                    # The checkpoint and the idempotent sinks make a restarted query exactly once.
                    restarts[i] += 1
                    pause = min(30.0, 2.0 ** restarts[i])  # a loaded machine needs time, not haste
                    log.warning("query %s failed transiently (%s); restart %d of %d from its checkpoint in %.0f s",
                                query.name, transient, restarts[i], MAX_TRANSIENT_RESTARTS, pause)
                    if stopping.wait(pause):
                        break
                    queries[i] = start_query(spark, settings, sinks[i], metrics, once=once)
                    continue
                if error is not None:
                    raise JournalFailed(f"query {query.name} failed: {error}")
                if not query.isActive and not once:
                    raise JournalFailed(f"query {query.name} stopped unexpectedly")
        return 0
    except Exception as exc:
        if not stopping.is_set():
            raise
        # A SIGTERM sent to the whole process group also stops Spark's JVM under our feet. That
        # is a stop like any other: every batch is exactly once whatever point it interrupts.
        log.info("journal stopped (%s while stopping)", type(exc).__name__)
        return 0
    finally:
        _shutdown(queries, sinks, spark)
        scratch.release()
        if held:
            lease.release()
        lease.dispose()
        metrics.close()
        journal.dispose()
        for sig, handler in previous.items():
            signal.signal(sig, handler)



# Spark-internal failures that say nothing about the data or the sinks: a Python worker that a
# loaded machine started too slowly for the JVM's fixed 10 s connect-back wait; and a fenced
# former leader that woke up and wrote the next entry of the shared offset log before it noticed
# (it stops itself; the query restarts from the checkpoint, which is exactly once).
TRANSIENT_SPARK_ERRORS = ("Python worker failed to connect back",
                          "Timed out while waiting for the Python worker to connect back",
                          "Concurrent update to the log",
                          "Multiple streaming jobs detected")
MAX_TRANSIENT_RESTARTS = 8


def _spark_transient(error: Any) -> str | None:
    """The transient failure ``error`` (a query's exception) reports, or None if it is a real one."""
    text = str(error)
    return next((known for known in TRANSIENT_SPARK_ERRORS if known in text), None)


def _halt_now(spark: Any, why: str) -> None:
    """Stop this process and its JVM at once, mid-batch or not: another process owns the journal now.

    A graceful stop would finish the current batch, which is what must not happen. Every sink is
    exactly once whatever point a stop interrupts, as for a SIGKILL.
    """
    log.error("%s: stopping at once", why)
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is not None:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(75)   # EX_TEMPFAIL: a supervisor may start it again, as a standby


def _shutdown(queries: list[Any], sinks: list[Sink], spark: Any) -> None:
    """Stop the queries, then close their sinks, then Spark; quietly, since the JVM may be gone."""
    for query in queries:
        try:
            query.stop()
        except Exception as exc:  # noqa: BLE001 - stop the others anyway
            log.warning("stopping a query: %s", (str(exc).splitlines() or [type(exc).__name__])[0][:200])
    for sink in sinks:   # no batch runs now: a producer left open would keep reconnecting
        try:
            sink.close()
        except Exception as exc:  # noqa: BLE001 - close the others anyway
            log.warning("closing the %s sink: %s", sink.name, (str(exc).splitlines() or [type(exc).__name__])[0][:200])
    try:
        spark.stop()
    except Exception as exc:  # noqa: BLE001
        log.warning("stopping Spark: %s", (str(exc).splitlines() or [type(exc).__name__])[0][:200])
