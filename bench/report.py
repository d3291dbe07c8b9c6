"""``bench/out/report.html``: every benchmark's figures and plots in one self-contained page.

    python -m bench.report [OUT_DIR]      (``toymb bench`` writes it after the benchmarks)

The page names the machine and the versions measured, and embeds the PNGs, so it can be read
offline and attached as it is.
"""

from __future__ import annotations

import base64
import html
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PACKAGES = ("flask", "uvloop", "httptools", "sqlalchemy", "psycopg", "orjson", "pyspark", "confluent-kafka", "stomp.py",
            "nats-py")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _tool_version(command: list[str]) -> str:
    if not shutil.which(command[0]):
        return "not installed"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def environment() -> dict[str, str]:
    """The machine and the versions of what was measured."""
    versions = {"machine": f"{_cpu()}, {os.cpu_count()} cores, {_memory_gib()}",
                "os": platform.platform(), "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version,
                "java": _tool_version(["java", "-version"]), "nats-server": _tool_version(["nats-server", "--version"]),
                "wrk": _tool_version(["wrk", "--version"])}
    activemq = Path("/usr/share/activemq/lib")
    if activemq.is_dir():
        jars = sorted(p.name for p in activemq.glob("activemq-broker-*.jar"))
        versions["activemq"] = jars[0].removeprefix("activemq-broker-").removesuffix(".jar") if jars else "unknown"
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _table(rows: dict[str, Any]) -> str:
    cells = []
    for key, value in rows.items():
        if isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)[:400]
        elif isinstance(value, float):
            value = f"{value:,.3f}"
        cells.append(f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(str(value))}</td></tr>")
    return "<table>" + "".join(cells) + "</table>"


def _image(png: Path) -> str:
    """``png`` embedded in the page, or nothing when the benchmark drew none."""
    if not png.exists():
        return ""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f"<p><img alt='{html.escape(png.name)}' src='data:image/png;base64,{data}'></p>"


def write(out_dir: Path = Path("bench/out")) -> Path:
    """Write ``report.html`` in ``out_dir`` from the ``*.json`` and ``*.png`` the benchmarks left there."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = ["<!doctype html><meta charset='utf-8'><title>ToyMB benchmarks</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:collapse}"
             "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:90%}</style>",
             f"<h1>ToyMB benchmarks</h1><p>Written {time.strftime('%Y-%m-%d %H:%M:%S %Z')}. Every ratio on a page "
             "was measured in the same run as both of its sides.</p>",
             "<h2>Machine and versions</h2>", _table(environment())]
    for name in ("concurrency.png", "latency_cdf.png"):
        parts.append(_image(out_dir / name))
    for result in sorted(out_dir.glob("*.json")):
        parts.append(f"<h2>{html.escape(result.stem)}</h2>")
        parts.append(_image(result.with_suffix(".png")))
        try:
            parts.append(_table(json.loads(result.read_text())))
        except ValueError:
            parts.append("<p>(unreadable JSON)</p>")
    page = out_dir / "report.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page


if __name__ == "__main__":
    print(write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("bench/out")))
