"""Fixtures of the NATS bridge tests: the reference codec jar (through Maven), the shared NATS and ActiveMQ.

NATS and ActiveMQ are shared with other test folders and xdist workers, so every test uses its own
uuid-named subjects and queues; tests that restart a server start a private one on free ports.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support import need_service, port_open

HERE = Path(__file__).resolve().parent
REFERENCE = ("io.nats.bridge", "nats-jms-bridge-message", "1.0.4")
# The jar's classes need only Jackson (a static ObjectMapper) and SLF4J; not its IBM MQ/JMS dependencies.
NEEDED = ("nats-jms-bridge-message", "jackson-databind", "jackson-core", "jackson-annotations", "slf4j-api")
NATS_URL = "nats://127.0.0.1:4222"
STOMP_URL = "stomp://127.0.0.1:61613"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>toymb.tests</groupId><artifactId>nats-codec-reference</artifactId><version>1</version>
  <dependencies><dependency><groupId>{0}</groupId><artifactId>{1}</artifactId><version>{2}</version></dependency>
  </dependencies>
</project>
"""


def unique(prefix: str) -> str:
    """A subject/queue name no other test (or xdist worker) uses."""
    return f"toymb.test.{prefix}.{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def reference_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The 1.0.4 jar and what its codec classes load, fetched by Maven (cached in ~/.m2)."""
    need_service(shutil.which("mvn") is not None and shutil.which("java") is not None, "mvn and java")
    work = tmp_path_factory.mktemp("nats-reference")
    (work / "pom.xml").write_text(POM.format(*REFERENCE), encoding="utf-8")
    done = subprocess.run(
        ["mvn", "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={work / 'lib'}", f"-DincludeArtifactIds={','.join(NEEDED)}"],
        capture_output=True, text=True, timeout=600)
    need_service(done.returncode == 0, f"Maven Central for {':'.join(REFERENCE)} ({done.stdout[-500:]})")
    jars = sorted(str(p) for p in (work / "lib").glob("*.jar"))
    assert any("nats-jms-bridge-message-1.0.4" in j for j in jars), jars
    return ":".join(jars)


@pytest.fixture(scope="session")
def nats_url() -> str:
    need_service(port_open("127.0.0.1", 4222), "nats-server on 127.0.0.1:4222 (services/nats.sh)")
    return NATS_URL


@pytest.fixture(scope="session")
def stomp_url() -> str:
    need_service(port_open("127.0.0.1", 61613) and port_open("127.0.0.1", 61616),
                 "ActiveMQ with STOMP on 127.0.0.1:61613 (services/activemq.sh)")
    return STOMP_URL
