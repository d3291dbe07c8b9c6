"""``toymb journal ingress``: run the routes file's Kafka ingress routes until stopped.

Wire it into ``toymb journal`` with ``journal.add_command(ingress)`` (journal_spark/cli.py), or
run ``python -m journal_spark.ingress_cli --routes FILE``.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import click

from .errors import JournalError

log = logging.getLogger(__name__)


def run_ingress(routes_path: str, *, names: tuple[str, ...] = (), idle_exit_s: float | None = None,
                metrics_host: str = "127.0.0.1", metrics_port: int = 0) -> int:
    """Run the Kafka ingress routes (all, or those named) in threads; returns how many ran.

    Raises:
        RoutesError: a bad routes file or an unknown route name.
        BridgeError: a route stopped on a hard failure or a data problem with on-error=fail.
    """
    from .bridges.kafka_ingress import KafkaIngress
    from .bridges.telemetry import BridgeTelemetry
    from .routes import RoutesError
    from .routes_file import load_routes

    routes = load_routes(routes_path)
    chosen = [r for r in routes.ingress if r.source.kind == "kafka" and (not names or r.name in names)]
    unknown = set(names) - {r.name for r in routes.ingress}
    if unknown:
        raise RoutesError(f"{routes_path}: no ingress route named {', '.join(sorted(unknown))}")
    if not chosen:
        raise RoutesError(f"{routes_path}: no Kafka ingress route (ingress.<name>.kafka.topic) to run")
    telemetry = BridgeTelemetry(routes.bridge_id)
    server = None
    if metrics_port:
        from prometheus_client import start_http_server

        server, _thread = start_http_server(metrics_port, addr=metrics_host, registry=telemetry.registry)
    stop = threading.Event()
    failures: list[BaseException] = []

    def work(ingress: KafkaIngress) -> None:
        try:
            ingress.run(stop, idle_exit_s=idle_exit_s)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)
            stop.set()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping the ingress after the current batch", signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    threads = [threading.Thread(target=work, args=(KafkaIngress(routes, r, telemetry),),
                                name=f"ingress-{r.name}") for r in chosen]
    try:
        for thread in threads:
            thread.start()
        log.info("ingress: %s", ", ".join(f"{r.source.name} -> {r.broker_url} {r.dest_topic}"
                                          for r in chosen))
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.5)
    finally:
        stop.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.shutdown()
    if failures:
        raise failures[0]
    return len(chosen)


@click.command()
@click.option("--routes", "routes_path", required=True, envvar="TOYMB_ROUTES",
              type=click.Path(dir_okay=False, exists=True), help="routes properties file [TOYMB_ROUTES]")
@click.option("--route", "names", multiple=True, help="run only this ingress route (repeatable)")
@click.option("--idle-exit", type=float, help="stop after this many seconds without records")
@click.option("--metrics-port", type=int, default=0, envvar="TOYMB_INGRESS_METRICS_PORT",
              help="serve the routing telemetry on /metrics at this port (0: off)")
@click.option("--log-level", default="INFO", envvar="TOYMB_LOG_LEVEL")
def ingress(routes_path: str, names: tuple[str, ...], idle_exit: float | None, metrics_port: int,
            log_level: str) -> None:
    """Bring Kafka topics into broker topics (ids kafka:<topic>:<partition>:<offset>, so no duplicates)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        run_ingress(routes_path, names=names, idle_exit_s=idle_exit, metrics_port=metrics_port)
    except JournalError as exc:
        raise click.ClickException(str(exc)) from None


if __name__ == "__main__":
    ingress()
