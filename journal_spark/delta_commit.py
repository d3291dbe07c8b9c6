"""A Delta append carrying ``txnAppId``/``txnVersion``, without Delta's state rebuild for the lookup.

Delta's DataFrame writer, given ``txnAppId`` and ``txnVersion``, asks the table's snapshot for
the application's last version (``OptimisticTransaction.txnVersion``), and Delta 4.4 answers
that only from the snapshot's fully computed state: a Spark job that replays the log's
checkpoint and every commit since, once per table version. For the journal's small, frequent
commits that job was three quarters of a commit's CPU (1,000-row appends, warm JVM: 1.16 CPU-s
with it, 0.25 without).

:func:`append` writes the same commit through Delta's own transaction API instead: the data files
(``writeFiles``, statistics and partitioning as the writer does), the ``SetTransaction`` action of
``txnAppId`` in the same atomic commit, and the application id in the transaction's read set, so
Delta's conflict checker still refuses the commit if any commit after the transaction's read
version set a version for the same application (a former leader racing its successor). Delta
stays the authority; what it no longer does is the lookup. The caller does that from the log
through delta-rs, reading only the commits it has not read yet, at a version not below the
transaction's (:attr:`Append.read_version`): every commit up to that version is checked by the
caller, every later one by Delta's conflict checker.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _JvmNames:
    """The JVM classes and objects a commit uses, looked up once per JVM.

    Each ``jvm.org.apache...`` step is a py4j round trip, and each step that is a package rather
    than a class makes the JVM search every jar on its class path for it first: a tenth of the
    driver's CPU per micro-batch (JFR, steady state), for the same names every time.
    """

    delta_log: Any
    set_transaction: Any
    write_operation: Any
    some: Any
    none: Any
    long: Any
    array_list: Any
    append_mode: Any
    to_seq: Any


_NAMES: list[tuple[Any, _JvmNames]] = []   # (the py4j JVM view, its names): one JVM per process


def _names(jvm: Any) -> _JvmNames:
    found = next((names for view, names in _NAMES if view is jvm), None)
    if found is None:
        delta = jvm.org.apache.spark.sql.delta
        found = _JvmNames(
            delta_log=delta.DeltaLog, set_transaction=delta.actions.SetTransaction,
            write_operation=getattr(delta, "DeltaOperations$Write"), some=jvm.scala.Some,
            none=getattr(getattr(jvm.scala, "None$"), "MODULE$"), long=jvm.java.lang.Long,
            array_list=jvm.java.util.ArrayList, append_mode=jvm.org.apache.spark.sql.SaveMode.Append,
            to_seq=jvm.org.apache.spark.api.python.PythonUtils.toSeq)
        _NAMES[:] = [(jvm, found)]   # a new JVM (a restarted gateway) replaces the old one's names
    return found


class Append:
    """One open Delta transaction on a table, for an append marked with ``app_id``."""

    def __init__(self, spark: Any, table: str, app_id: str) -> None:
        self._names = _names(spark._jvm)
        self.app_id = app_id
        self._txn = self._names.delta_log.forTable(spark._jsparkSession, table).startTransaction()
        # Declares that this commit depends on app_id's version: Delta refuses it if another
        # commit after read_version set one (ConcurrentTransactionException).
        self._txn.readTxn().addOne(app_id)

    @property
    def read_version(self) -> int:
        """The table version this transaction started from (-1: no table yet)."""
        return int(self._txn.readVersion())

    def table_schema(self) -> str:
        """The table's columns and types (``simpleString``), to compare with the batch's."""
        return str(self._txn.metadata().schema().simpleString())

    def commit(self, df: Any, version: int, partition_by: Sequence[str]) -> int:
        """Write ``df``'s files and commit them with ``SetTransaction(app_id, version)``; the table version.

        Raises:
            py4j.protocol.Py4JJavaError: Delta refused the commit (a conflict, say).
        """
        names = self._names
        files = self._txn.writeFiles(df._jdf)
        marker = names.set_transaction(self.app_id, version, names.some(names.long(int(time.time() * 1000))))
        columns = names.array_list()
        for name in partition_by:
            columns.add(name)
        none = names.none
        # DeltaOperations.Write(mode, partitionBy, predicate, userMetadata, and five more Options):
        # what the DataFrame writer records for an append, so the table's history reads the same.
        operation = names.write_operation(names.append_mode, names.some(names.to_seq(columns)),
                                          none, none, none, none, none, none, none)
        return int(self._txn.commit(files.appended(marker), operation))
