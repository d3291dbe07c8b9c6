"""``toymb consume`` and the README quick start, run exactly as written against a real node."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from driver import NotFound, Template
from tests.support import ROOT, NodeProcess, wait_until

QUICKSTART = re.compile(r"<!-- quickstart:begin -->(.*?)<!-- quickstart:end -->", re.S)
FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)


def quickstart_blocks() -> list[tuple[str, str]]:
    match = QUICKSTART.search((ROOT / "README.md").read_text())
    assert match, "README.md has no quickstart block"
    return FENCE.findall(match.group(1))


def command(line: str) -> list[str]:
    """A README command line as an argv; ``toymb`` and ``python`` run from this environment."""
    words = line.split("#", 1)[0].split()
    if words[0] == "toymb":
        return [sys.executable, "-m", "broker", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    raise AssertionError(f"unexpected README command {line!r}")


def consumer_env(node: NodeProcess) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    env.update(TOYMB_URLS=node.url, PYTHONUNBUFFERED="1")
    return env


def subscribers(template: Template, topic: str, group: str) -> list[dict[str, object]]:
    try:
        found: list[dict[str, object]] = template.group_info(topic, group)["subscribers"]
    except NotFound:  # the topic does not exist until someone uses it
        return []
    return found


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"did not exit on SIGTERM:\n{out}") from None
    return out


def test_readme_quickstart_works_as_written(node: NodeProcess, template: Template, tmp_path: Path) -> None:
    blocks = quickstart_blocks()
    files = {}
    for lang, code in blocks:
        if lang == "python":
            name = code.splitlines()[0].lstrip("# ").strip()
            assert name.endswith(".py"), f"a quick start snippet should start with its file name: {name!r}"
            (tmp_path / name).write_text(code)
            files[name] = code
    assert set(files) == {"publisher.py", "consumer.py"}
    for name, code in files.items():
        assert len(code.strip().splitlines()) <= 25, f"{name} is no longer a quick start"
    (shell,) = [code for lang, code in blocks if lang == ""]
    consume_line, publish_line = [line for line in shell.splitlines() if line.strip()]

    env = consumer_env(node)
    consumer = subprocess.Popen(command(consume_line), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        def registered() -> bool:
            return consumer.poll() is not None or len(subscribers(template, "orders", "billing")) == 1

        wait_until(registered, timeout=30, what="the consumer registered")
        assert consumer.poll() is None
        published = subprocess.run(command(publish_line), cwd=tmp_path, env=env, capture_output=True,
                                   text=True, timeout=60)
        assert published.returncode == 0, published.stderr
        assert published.stdout.count("stored ") == 3

        def caught_up() -> bool:
            return all(template.group_info("orders", g)["total_lag"] == 0 for g in ("billing", "audit"))

        wait_until(caught_up, timeout=30, what="both groups caught up")
    finally:
        out = stop(consumer)
    assert consumer.returncode == 0, out
    # Two handlers print from two threads: print's text and its newline are separate writes, so
    # their lines can interleave. Each f-string is one write: find those, not lines.
    assert re.findall(r"billing customer-7: \{'order': (\d)", out) == ["0", "1", "2"], out
    assert "billing customer-8: 'gift wrap, please'" in out
    assert "billing None: b'\\x00\\x01 raw bytes'" in out
    assert "audit #5:" in out
    # SIGTERM deregistered both subscribers.
    for group in ("billing", "audit"):
        assert template.group_info("orders", group)["subscribers"] == []


HANDLERS = '''
from driver import Message, subscribe

@subscribe(topic="{topic}", group="cli")
def handle(message: Message) -> None:
    print("got", message.body, flush=True)
'''


@pytest.mark.parametrize("spec", ["handlers", "handlers:handle"])
def test_consume_command_serves_on_the_given_port_and_deregisters_on_sigterm(
        node: NodeProcess, template: Template, tmp_path: Path, topic: str, spec: str) -> None:
    from tests.support import free_port

    (tmp_path / "handlers.py").write_text(HANDLERS.format(topic=topic))
    port = free_port()
    env = consumer_env(node)
    env["TOYMB_CONSUMER_PORT"] = str(port)
    proc = subprocess.Popen([sys.executable, "-m", "broker", "consume", spec], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        wait_until(lambda: proc.poll() is not None or subscribers(template, topic, "cli"),
                   timeout=30, what="registration")
        (sub,) = template.group_info(topic, "cli")["subscribers"]
        assert sub["url"] == f"http://127.0.0.1:{port}/toymb/push"
        assert sub["id"].startswith("handlers.")
        template.send(topic, None, "ping")
        wait_until(lambda: template.group_info(topic, "cli")["total_lag"] == 0, timeout=30, what="delivery")
    finally:
        out = stop(proc)
    assert proc.returncode == 0 and "got ping" in out, out
    assert template.group_info(topic, "cli")["subscribers"] == []


def test_consume_command_reports_a_module_without_handlers(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("x = 1\n")
    result = subprocess.run([sys.executable, "-m", "broker", "consume", "empty"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "no @subscribe handlers" in result.stderr
    result = subprocess.run([sys.executable, "-m", "broker", "consume", "missing_module"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "cannot import" in result.stderr
