"""The compose cluster on a real Docker engine, driven through the ``docker`` SDK and the compose CLI.

The engine and the offline base image come from ``services/docker.sh start`` (``make test`` runs it);
the images build from the compose file's own ``build`` sections, on the host's network (the engine
runs without iptables, so containers have no way out); ``docker-compose`` (v1, Debian) or
``docker compose`` (v2) runs the file as a user would.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import yaml
from docker.models.containers import Container

from tests.support import ROOT, free_port

BASE_IMAGE = os.environ.get("TOYMB_DOCKER_BASE", "toymb/debian:bookworm")
TOKENS = "pub=publish,sub=consume,root=admin"
NODES = ("toymb-1", "toymb-2", "toymb-3")


def compose_file() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def resolve(value: Any, env: dict[str, str]) -> str:
    """Expand ``${NAME:?msg}`` and ``${NAME:-default}`` as compose does."""
    def sub(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        if name in env:
            return env[name]
        if op == ":-":
            return rest
        raise AssertionError(f"compose needs {name}: {rest}")

    return re.sub(r"\$\{([A-Z_0-9]+)(:[-?])?([^}]*)\}", sub, str(value))


def engine() -> docker.DockerClient:
    """The engine on /var/run/docker.sock (or DOCKER_HOST); raises ``docker.errors.DockerException``."""
    client = docker.from_env(timeout=120)
    client.ping()
    return client


def compose_command() -> list[str]:
    """``docker compose`` (v2) where the plugin exists, else Debian's ``docker-compose`` (v1)."""
    docker_cli = shutil.which("docker")
    if docker_cli and subprocess.run([docker_cli, "compose", "version"], capture_output=True).returncode == 0:
        return [docker_cli, "compose"]
    v1 = shutil.which("docker-compose")
    if v1 is None:
        raise AssertionError("neither `docker compose` nor `docker-compose` is installed (services/docker.sh start)")
    return [v1]


BUILD_LOCK = ROOT / ".services" / "docker" / "images.lock"


def build_images(client: docker.DockerClient, env: dict[str, str]) -> dict[str, str]:
    """Build every image the compose file names, from its ``build`` sections: image -> id.

    One build at a time per clone (``BUILD_LOCK``): ``services/setup.sh`` starts one in the
    background as soon as the engine is up, and the compose test's build then waits for it and finds
    every layer cached, instead of building the same layers a second time beside it.
    """
    BUILD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with BUILD_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_images(client, env)


def _build_images(client: docker.DockerClient, env: dict[str, str]) -> dict[str, str]:
    built: dict[str, str] = {}
    for service in compose_file()["services"].values():
        image, build = service["image"], service.get("build")
        if build is None or image in built:
            continue
        args = {k: resolve(v, env) for k, v in build.get("args", {}).items()}
        try:
            result, _logs = client.images.build(
                path=str(ROOT / build.get("context", ".")), dockerfile=build.get("dockerfile", "Dockerfile"),
                target=build.get("target"), buildargs=args, tag=image, network_mode="host", rm=True,
                forcerm=True)
        except docker.errors.BuildError as exc:
            tail = "".join(str(line.get("stream", line.get("error", ""))) for line in list(exc.build_log)[-30:])
            raise AssertionError(f"building {image} failed: {exc.msg}\n{tail}") from None
        built[image] = str(result.id)
    return built


@dataclass
class ComposeCluster:
    """One compose project of the repository's docker-compose.yml, its ports on 127.0.0.1."""

    client: docker.DockerClient
    project: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_lane(cls, client: docker.DockerClient, lane: str) -> ComposeCluster:
        ports = {f"TOYMB_HTTP_PORT_{i}": str(free_port()) for i in (1, 2, 3)}
        env = {"TOYMB_TOKENS": TOKENS, "TOYMB_CLUSTER_TOKEN": uuid.uuid4().hex,
               "TOYMB_PG_PASSWORD": uuid.uuid4().hex, "TOYMB_BASE_IMAGE": BASE_IMAGE, **ports}
        return cls(client, "toymb" + re.sub(r"[^a-z0-9]", "", lane.lower()), env)

    def compose(self, *args: str, timeout: float = 600) -> str:
        command = [*compose_command(), "-p", self.project, "-f", str(ROOT / "docker-compose.yml"), *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")} | self.env
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        output = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}):\n{output}"
        return done.stdout

    def url(self, node: str) -> str:
        return f"http://127.0.0.1:{self.env[f'TOYMB_HTTP_PORT_{NODES.index(node) + 1}']}"

    def urls(self) -> list[str]:
        return [self.url(n) for n in NODES]

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def container(self, service: str) -> Container:
        found = self.client.containers.list(all=True, filters={"label": [
            f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]})
        assert len(found) == 1, f"{len(found)} containers of {service} in {self.project}"
        return found[0]

    def health(self, service: str) -> str:
        state = self.container(service).attrs["State"]
        return str(state.get("Health", {}).get("Status", state["Status"]))

    def sql(self, query: str) -> list[list[str]]:
        """Rows of ``query`` run by psql inside the PostgreSQL container."""
        code, out = self.container("postgres").exec_run(
            ["psql", "-h", "127.0.0.1", "-U", "toymb", "-d", "toymb", "-tAF", "\t", "-c", query],
            environment={"PGPASSWORD": self.env["TOYMB_PG_PASSWORD"]})
        assert code == 0, out.decode(errors="replace")
        return [line.split("\t") for line in out.decode().splitlines() if line]

    def kafka_keys(self, topic: str, expected: int) -> set[str]:
        """Keys of the committed records of ``topic``, read from inside the journal's container."""
        script = (
            "import sys\nfrom confluent_kafka import Consumer\n"
            "c = Consumer({'bootstrap.servers': 'kafka:9092', 'group.id': sys.argv[2],"
            " 'auto.offset.reset': 'earliest', 'isolation.level': 'read_committed', 'enable.auto.commit': False})\n"
            "c.subscribe([sys.argv[1]])\nkeys, idle = set(), 0\n"
            "while idle < 10 and len(keys) < int(sys.argv[3]):\n"
            "    m = c.poll(1.0)\n"
            "    if m is None or m.error():\n        idle += 1\n        continue\n"
            "    idle = 0\n    keys.add(m.key().decode())\n"
            "c.close()\nprint('\\n'.join(sorted(keys)))\n")
        code, out = self.container("journal").exec_run(
            ["python", "-c", script, topic, "check-" + uuid.uuid4().hex[:8], str(expected)])
        assert code == 0, out.decode(errors="replace")
        return set(out.decode().split())

    def logs(self, service: str, lines: int = 40) -> str:
        try:
            return str(self.container(service).logs(tail=lines).decode(errors="replace"))
        except (AssertionError, docker.errors.DockerException) as exc:
            return f"({service}: no logs: {exc})"

    def all_logs(self) -> str:
        services = ["postgres", *NODES, "kafka", "activemq", "journal"]
        return "\n".join(f"--- {s} ({self.health_or_none(s)})\n{self.logs(s)}" for s in services)

    def health_or_none(self, service: str) -> str:
        try:
            return self.health(service)
        except (AssertionError, docker.errors.DockerException):
            return "none"

    @contextmanager
    def subscriber(self, module: Path) -> Iterator[Container]:
        """``toymb consume`` of ``module`` in a container of the node image, on the compose network."""
        name = f"{self.project}-subscriber"
        with suppress(docker.errors.NotFound):
            self.client.containers.get(name).remove(force=True)
        container = self.client.containers.run(
            "toymb-node:latest", ["consume", module.stem, "--log-level", "WARNING"], name=name, detach=True,
            network=self.network, volumes={str(module): {"bind": f"/handlers/{module.name}", "mode": "ro"}},
            environment={"PYTHONPATH": "/handlers", "TOYMB_URLS": ",".join(f"http://{n}:8080" for n in NODES),
                         "TOYMB_TOKEN": "sub", "TOYMB_CONSUMER_HOST": "0.0.0.0", "TOYMB_CONSUMER_PORT": "9000",
                         "TOYMB_ADVERTISE_URL": f"http://{name}:9000"})
        try:
            yield container
        finally:
            container.remove(force=True)


def received_ids(container: Container) -> list[str]:
    """The ids a subscriber container printed (``received <id>``), in order, repeats included."""
    return [line.split()[1] for line in container.logs(stdout=True, stderr=False).decode().splitlines()
            if line.startswith("received ")]


def main(argv: list[str]) -> int:
    """``python -m tests.packaging.compose_cluster build``: build the images (setup.sh runs it)."""
    if argv != ["build"]:
        print("usage: python -m tests.packaging.compose_cluster build", file=sys.stderr)
        return 2
    for image, image_id in build_images(engine(), {"TOYMB_BASE_IMAGE": BASE_IMAGE}).items():
        print(f"{image} {image_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
