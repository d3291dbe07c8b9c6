"""``toymb`` without an optional extra: its commands are absent, the others work (the node image has no stomp)."""

from __future__ import annotations

import subprocess
import sys

# Runs ``toymb`` in an interpreter where ``stomp`` cannot be imported, as when ``[journal]`` is not installed.
WITHOUT_STOMP = """
import runpy, sys
class NoStomp:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "stomp":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoStomp())
sys.argv = ["toymb", *sys.argv[1:]]
runpy.run_module("broker", run_name="__main__")
"""


def toymb_without_stomp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_STOMP, *args], capture_output=True, text=True,
                          timeout=60, check=False)


def commands(help_text: str) -> set[str]:
    listed = help_text.split("Commands:", 1)[1].splitlines()
    return {line.split()[0] for line in listed if line.startswith("  ") and line.split()}


def test_commands_of_a_missing_extra_are_left_out_and_the_rest_work() -> None:
    top = toymb_without_stomp("--help")
    assert top.returncode == 0, top.stderr
    assert commands(top.stdout) == {"bench", "consume", "journal", "seek", "serve", "status"}

    journal = toymb_without_stomp("journal", "--help")
    assert journal.returncode == 0, journal.stderr
    assert commands(journal.stdout) == {"compact", "ingress", "replay", "run"}

    bridge = toymb_without_stomp("bridge", "status")
    assert bridge.returncode == 2
    assert "No such command 'bridge'" in bridge.stderr


def test_every_command_is_listed_when_every_extra_is_installed() -> None:
    top = subprocess.run([sys.executable, "-m", "broker", "--help"], capture_output=True, text=True, timeout=60,
                         check=True)
    assert commands(top.stdout) == {"bench", "bridge", "consume", "journal", "seek", "serve", "status"}
    bridge = subprocess.run([sys.executable, "-m", "broker", "bridge", "--help"], capture_output=True, text=True,
                            timeout=60, check=True)
    assert "nats" in commands(bridge.stdout)
    journal = subprocess.run([sys.executable, "-m", "broker", "journal", "--help"], capture_output=True, text=True,
                             timeout=60, check=True)
    assert {"ingress", "jms-ingress", "run"} <= commands(journal.stdout)
