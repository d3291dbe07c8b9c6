"""``toymb bench``: run every benchmark and print the ratios."""

from __future__ import annotations

import importlib
import traceback
from pathlib import Path

import click

BENCHES = ("publish", "concurrency", "push", "push_features", "journal", "cluster", "kafka_bridge", "jms_bridge",
           "nats_bridge", "console")


@click.command()
@click.option("--quick", is_flag=True, help="shorter runs, for a smoke check")
@click.option("--out", "out_dir", default="bench/out", type=click.Path(file_okay=False), help="JSON and PNG folder")
@click.option("--only", multiple=True, type=click.Choice(BENCHES), help="run only these")
def bench(quick: bool, out_dir: str, only: tuple[str, ...]) -> None:
    """Benchmarks against the raw ceiling and peers, measured in the same run."""
    out = Path(out_dir)
    failed = []
    for name in only or BENCHES:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bench.{name}":
                continue
            raise
        try:
            module.run(quick=quick, out_dir=out)
        except Exception:  # noqa: BLE001 - one broken bench must not hide the others
            traceback.print_exc()
            failed.append(name)
    from bench.report import write

    click.echo(f"report: {write(out)}")
    if failed:
        raise click.ClickException(f"benchmarks failed: {', '.join(failed)}")
