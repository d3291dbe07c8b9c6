"""Fixtures of the console's browser tests: one real 3-node PostgreSQL cluster, a JMS ingress against
the shared ActiveMQ, the journal job's metrics server, and Debian's chromium driven by Selenium.

Everything is module-scoped: a cluster and a browser start once for the whole module. Screenshots
go to ``$TOYMB_TEST_OUTPUT/console`` (default ``test-output/console`` in the checkout).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from broker.store import Store
from tests import conftest as root_conftest
from tests.bridges_jms.conftest import amq_up, unique
from tests.cluster.harness import Cluster
from tests.support import ROOT, free_port, need_service, own_database, wait_until, worker_name

ADMIN, READER, PUBLISHER = "console-admin-tok", "console-read-tok", "console-pub-tok"
TOKENS = f"{ADMIN}=admin,{READER}=consume,{PUBLISHER}=publish"
OUTPUT = Path(os.environ.get("TOYMB_TEST_OUTPUT", ROOT / "test-output")) / "console"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium_available() -> bool:
    return shutil.which("chromium") is not None and shutil.which("chromedriver") is not None


class JmsIngressProcess:
    """``toymb journal jms-ingress`` as a real process, with its management API on ``port``."""

    def __init__(self, base: Path, broker_url: str, port: int) -> None:
        self.queue = unique("console")
        self.topic = "console.jms"
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.routes = base / "routes.properties"
        self.routes.write_text("\n".join([
            "bridge.id=console-test", f"ingress.jms-in.jms.queue={self.queue}",
            f"ingress.jms-in.dest.topic={self.topic}",
            f"ingress.jms-in.broker.url={broker_url}", f"ingress.jms-in.token={PUBLISHER}",
            "ingress.jms-in.max-batch-time=100"]) + "\n", encoding="utf-8")
        self.log_path = base / "jms-ingress.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> JmsIngressProcess:
        log = open(self.log_path, "ab")
        code = "from journal_spark.jms.cli import jms_ingress; jms_ingress()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, "--routes", str(self.routes), "--port",
                                      str(self.port)], cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_until(lambda: self.state() == "STARTED", timeout=60, interval=0.2, what="the JMS ingress")
        return self

    def state(self) -> str | None:
        try:
            return str(requests.get(f"{self.url}/bridges/jms-in", timeout=1).json()["state"])
        except (requests.RequestException, ValueError, KeyError):
            return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class ConsoleCluster:
    """The cluster, its bridge and journal metrics, and the addresses the tests use."""

    def __init__(self, cluster: Cluster, ingress: JmsIngressProcess, store_url: str) -> None:
        self.cluster = cluster
        self.ingress = ingress
        self.store_url = store_url
        self.url = cluster.url("toymb-1")

    def api(self, method: str, path: str, token: str = ADMIN, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.url + path, headers={"Authorization": f"Bearer {token}"},
                                timeout=10, **kwargs)


@pytest.fixture(scope="module")
def console_cluster(pg_available: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleCluster]:
    need_service(pg_available, "PostgreSQL (services/postgres.sh)")
    need_service(amq_up(), "ActiveMQ with STOMP on 127.0.0.1:61613 (services/activemq.sh)")
    base = tmp_path_factory.mktemp("console")
    database = own_database(root_conftest.SERVER_PG_URL, worker_name("toymb_console_test"))
    store = Store(database)
    store.drop_schema()
    store.create_schema()
    # The journal job's own metrics server (journal_spark.metrics), over the cluster's store: the
    # console reads its health from it. Spark itself is not started (too heavy for this module); the
    # journaled offsets come from the store, as the journal job would leave them.
    from broker.store.journal import JournalStore
    from journal_spark.metrics import JournalMetrics

    journal_store = JournalStore(database)
    journal_metrics = JournalMetrics(journal_store)
    metrics_port = journal_metrics.serve("127.0.0.1", free_port())
    bridge_port = free_port()
    env = {"TOYMB_TOKENS": TOKENS, "TOYMB_CLUSTER_TOKEN": "console-cluster-secret",
           "TOYMB_CONSOLE_REFRESH_MS": "500", "TOYMB_CONSOLE_BRIDGES": f"jms=http://127.0.0.1:{bridge_port}",
           "TOYMB_CONSOLE_JOURNAL_METRICS": f"http://127.0.0.1:{metrics_port}/metrics"}
    cluster = Cluster(base, database, extra_env=env, token=ADMIN)
    ingress = JmsIngressProcess(base, "", bridge_port)
    try:
        cluster.start()
        ingress = JmsIngressProcess(base, cluster.url("toymb-2"), bridge_port).start()
        yield ConsoleCluster(cluster, ingress, database)
    finally:
        ingress.stop()
        cluster.stop()
        journal_metrics.close()
        journal_store.dispose()
        store.dispose()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need_service(chromium_available(), "Debian's chromium and chromium-driver (services/chromium.sh)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1300", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> Path:
    """Save the page as ``OUTPUT/<name>.png`` and return its path."""
    path = OUTPUT / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
