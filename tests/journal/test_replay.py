"""Journal a node's messages with the real ``toymb journal run --once``, wipe the SQL store, and
restore the topic with ``toymb journal replay``: same ids, keys, headers, bodies, timestamps."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from broker.store.sql import Store
from tests.journal.conftest import store_rows
from tests.support import NodeProcess

T0 = 1_700_000_000_000


def _toymb(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    env.update({"TOYMB_JOURNAL_METRICS_PORT": "0", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable})
    return subprocess.run([sys.executable, "-m", "broker", *args], env=env, cwd=str(cwd), capture_output=True,
                          text=True, timeout=300)


def _messages() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(300):
        message: dict[str, Any] = {"id": f"order-{i}", "timestamp": T0 + i * 1000,
                                   "headers": {"seq": str(i), "source": "test"} if i % 4 else {}}
        if i % 5:
            message["key"] = f"customer-{i % 17}"
        if i % 3 == 0:
            message["body"] = {"total": i, "note": "ünïcode"}
        elif i % 3 == 1:
            message.update(body=f"plain {i}", content_type="text/plain")
        else:
            message["body_base64"] = base64.b64encode(bytes([0xFE, i % 256, 0])).decode()
        out.append(message)
    return out


def test_replay_after_wiping_the_store_restores_the_topic(tmp_path: Path) -> None:
    data = tmp_path / "node"
    routes = tmp_path / "routes.properties"
    routes.write_text("# no routes: the journal alone\n")
    with NodeProcess(data) as node:
        for start in range(0, 300, 100):
            answer = requests.post(f"{node.url}/v1/topics/orders/messages",
                                   json={"messages": _messages()[start:start + 100]}, timeout=30)
            assert answer.status_code == 201, answer.text
        db = Store(f"sqlite:///{data / 'toymb.db'}")
        original = store_rows(db)
        db.dispose()
        assert len(original) == 300

        journaled = _toymb("journal", "run", "--once", "--data-dir", str(data), "--routes", str(routes),
                           cwd=data)
        assert journaled.returncode == 0, journaled.stdout[-3000:] + journaled.stderr[-3000:]
        as_of = datetime.now(UTC).isoformat()
        time.sleep(1.1)   # Delta's commit times have ms precision; keep the two apart
        late = [{"id": f"late-{i}", "key": "late", "body": {"i": i}} for i in range(40)]
        answer = requests.post(f"{node.url}/v1/topics/orders/messages", json={"messages": late}, timeout=30)
        assert answer.status_code == 201, answer.text
        again = _toymb("journal", "run", "--once", "--data-dir", str(data), cwd=data)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]

    for name in ("toymb.db", "toymb.db-wal", "toymb.db-shm"):
        (data / name).unlink(missing_ok=True)          # the SQL store is gone; the journal is not

    with NodeProcess(data) as node:
        # As of the first run: the 40 late messages are not in the table yet.
        replayed = _toymb("journal", "replay", "--data-dir", str(data), "--topic", "orders", "--as-of", as_of,
                          "--to-url", node.url, cwd=data)
        assert replayed.returncode == 0, replayed.stderr[-3000:]
        assert "replayed 300 messages of orders: 300 stored, 0 already there" in replayed.stdout
        db = Store(f"sqlite:///{data / 'toymb.db'}")
        restored = store_rows(db)
        # Same ids, and same partition and offset: per-partition order survived the round trip.
        assert restored == original

        again = _toymb("journal", "replay", "--journal-dir", str(data / "journal"), "--topic", "orders",
                       "--to-url", node.url, "--from-ts", str(T0 + 100_000), "--to-ts", str(T0 + 150_000),
                       cwd=data)
        assert "replayed 50 messages of orders: 0 stored, 50 already there" in again.stdout, again.stderr
        assert store_rows(db) == original

        everything = _toymb("journal", "replay", "--data-dir", str(data), "--topic", "orders",
                            "--to-url", node.url, cwd=data)
        assert "replayed 340 messages of orders: 40 stored, 300 already there" in everything.stdout, \
            everything.stderr
        before = _toymb("journal", "replay", "--data-dir", str(data), "--topic", "orders",
                        "--as-of", "2001-01-01T00:00:00", "--to-url", node.url, cwd=data)
        assert before.returncode == 1 and "as of 2001-01-01" in before.stderr, before.stderr
        missing = _toymb("journal", "replay", "--data-dir", str(data), "--topic", "nope",
                         "--to-url", node.url, cwd=data)
        assert missing.returncode == 1 and "holds no topic 'nope'" in missing.stderr
        db.dispose()
