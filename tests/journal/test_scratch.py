"""Each journal process's temporary folder: held while its process lives, removed once it is gone.

Real processes and real locks; no JVM (the kill tests in test_crash.py and test_takeover.py check
the same with real journal jobs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from journal_spark.errors import TempFolderUnusable
from journal_spark.scratch import ScratchFolder, sweep

# Another process that takes a folder in ROOT, fills it like a JVM would, says where, and waits.
HOLDER = """
import sys
from journal_spark.scratch import ScratchFolder
folder = ScratchFolder.claim(sys.argv[1])
(folder.path / "sqlite-3.47.1.0-libsqlitejdbc.so").write_bytes(b"x" * 1000)
(folder.path / "blockmgr-1").mkdir()
print(folder.path, flush=True)
sys.stdin.read()
"""


def _holder(root: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, f"the holder process failed ({proc.wait(10)})"
    return proc, Path(line)


def test_a_live_process_keeps_its_folder_and_a_killed_ones_goes_at_the_next_start(tmp_path: Path) -> None:
    root = tmp_path / "journal-tmp"
    standby, standby_folder = _holder(root)
    leader, leader_folder = _holder(root)
    try:
        assert standby_folder.name.startswith(f"{standby.pid}-") and standby_folder != leader_folder
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(10)
        assert leader_folder.is_dir()   # nothing removes it at the kill itself
        restarted = ScratchFolder.claim(root)
        assert not leader_folder.exists() and not (root / f"{leader_folder.name}.lock").exists()
        assert (standby_folder / "blockmgr-1").is_dir(), "a live process's folder was removed"
        assert sorted(p.name for p in root.iterdir()) == sorted(
            [standby_folder.name, f"{standby_folder.name}.lock", restarted.path.name, f"{restarted.path.name}.lock"])
        restarted.release()
        restarted.release()   # idempotent
        assert sorted(p.name for p in root.iterdir()) == sorted([standby_folder.name, f"{standby_folder.name}.lock"])
    finally:
        for proc in (standby, leader):
            proc.kill()
            proc.wait(10)
    assert [p.name for p in sweep(root)] == [standby_folder.name] and list(root.iterdir()) == []


def test_leftovers_without_a_live_process_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "journal-tmp"
    root.mkdir()
    (root / "123-deadbeef" / "spark-x").mkdir(parents=True)   # its lock was deleted by hand
    stale, fresh = root / ".new-9-0badcafe", root / ".new-10-0badcafe"
    stale.touch()
    fresh.touch()   # a process between making its lock and renaming it: not touched
    os.utime(stale, (1, 1))
    folder = ScratchFolder.claim(root)
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [fresh.name, folder.path.name, f"{folder.path.name}.lock"])
    folder.release()


def test_an_unusable_folder_is_refused_at_startup(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(TempFolderUnusable, match="journal.tmp.dir"):
        ScratchFolder.claim(blocker / "journal-tmp")
    # The setting has its effect in the job: refused before Spark starts, with the reason.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    done = subprocess.run([sys.executable, "-m", "broker", "journal", "run", "--database-url",
                           f"sqlite:///{tmp_path / 'toymb.db'}", "--metrics-port", "0",
                           "--tmp-dir", str(blocker / "journal-tmp")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "cannot make the journal's temporary folder" in done.stderr and "Not a directory" in done.stderr
