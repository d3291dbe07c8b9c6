"""Each Spark session's own temporary folder, and the removal of those whose process is gone.

A JVM deletes its temporary files at a normal exit only (``deleteOnExit``, shutdown hooks): the
native libraries that sqlite-jdbc, snappy and lz4-java extract (``sqlite-*``, ``snappy-*``,
``liblz4-java-*``), Spark's ``blockmgr-*`` and ``spark-*`` folders and its artifact manager's
``artifacts-*``. A journal job killed with SIGKILL (the OOM killer, a supervisor in a crash loop)
left them all in /tmp: about 20 entries a kill.

So each process that starts a Spark session takes a folder of its own, ``<root>/<pid>-<random>``,
and points every temporary path of the session there (:func:`session_conf`, :func:`session_env`).
It holds an exclusive ``flock`` on ``<root>/<pid>-<random>.lock`` for its whole life. Any process
taking a folder first removes the folders whose lock it can take: the kernel drops a ``flock``
when its holder dies, however it dies, so a folder is removed only once its process is gone (a
reused pid changes nothing), and a standby's folder is never removed by its leader, nor the other
way.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TempFolderUnusable

# A lock file is made under this prefix, locked, then renamed to its final name: a sweeper never
# sees a final lock file that is not locked yet. One left by a process killed in between is
# removed once it is this old (a live process renames it within microseconds).
_NEW = ".new-"
_STALE_NEW_S = 60.0


def default_root() -> Path:
    """``$XDG_CACHE_HOME/toymb/journal-tmp`` (default ``~/.cache/toymb/journal-tmp``): the user's, never the cwd."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "toymb" / "journal-tmp"


@dataclass
class ScratchFolder:
    """A folder only this process uses, held (``flock``) until :meth:`release` or the process's end."""

    path: Path
    lock: Path
    _fd: int | None = field(default=None, repr=False)

    @classmethod
    def claim(cls, root: str | Path | None = None) -> ScratchFolder:
        """Remove the folders of processes that are gone from ``root``, then take a new one there.

        Raises:
            TempFolderUnusable: ``root`` cannot be created or written.
        """
        base = Path(root) if root else default_root()
        try:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
            sweep(base)
            name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            new = base / f"{_NEW}{name}"
            fd = os.open(new, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock = base / f"{name}.lock"
            os.rename(new, lock)
            path = base / name
            path.mkdir(mode=0o700)
        except OSError as exc:
            raise TempFolderUnusable(f"cannot make the journal's temporary folder in {base}: {exc.strerror or exc}; "
                                     "point journal.tmp.dir (TOYMB_JOURNAL_TMP_DIR) at a writable folder") from None
        return cls(path.resolve(), lock, fd)

    def release(self) -> None:
        """Remove the folder and its lock (a clean stop; after the JVM has stopped). Idempotent."""
        if self._fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        self.lock.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


def sweep(root: Path) -> list[Path]:
    """Remove the folders in ``root`` whose process is gone; returns them."""
    removed = []
    for entry in sorted(root.iterdir()):
        if entry.name.endswith(".lock"):
            if _remove_if_unlocked(entry, root / entry.name[:-len(".lock")]):
                removed.append(root / entry.name[:-len(".lock")])
        elif entry.name.startswith(_NEW):
            _remove_stale_new(entry)
        elif entry.is_dir() and not (root / f"{entry.name}.lock").exists():
            # A lock is made before its folder and removed after it: a folder without one is a
            # leftover (a lock deleted by hand, say) that no process can be using.
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _remove_if_unlocked(lock: Path, folder: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False   # another process removed it meanwhile
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False   # its process is alive
        shutil.rmtree(folder, ignore_errors=True)
        lock.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


def _remove_stale_new(new: Path) -> None:
    try:
        if time.time() - new.stat().st_mtime > _STALE_NEW_S:
            _remove_if_unlocked(new, new.with_name(new.name[len(_NEW):]))
    except FileNotFoundError:
        pass


def session_conf(folder: Path) -> dict[str, str]:
    """The Spark settings that keep a session's driver-side temporary files in ``folder``.

    ``java.io.tmpdir`` is where the native libraries are extracted (``org.sqlite.tmpdir`` is
    sqlite-jdbc's own) and where Spark's artifact manager and ``Utils.createTempDir`` work. The SQL
    warehouse, unused by the journal, is created empty at start: in the cwd by default.
    """
    java_options = " ".join(shlex.quote(f"-D{name}={folder}") for name in ("java.io.tmpdir", "org.sqlite.tmpdir"))
    return {"spark.driver.extraJavaOptions": java_options, "spark.sql.warehouse.dir": str(folder / "warehouse")}


def session_env(folder: Path) -> dict[str, str]:
    """The environment Spark's JVM starts with, so that it and what it starts keep to ``folder``.

    ``SPARK_LOCAL_DIRS`` holds the block manager's and the ``spark-*`` folders (as an environment
    variable, not ``spark.local.dir``, which Spark warns about on a cluster); ``TMPDIR`` is for the
    Python workers. On a ``spark://`` cluster the executors' folders are the workers' (see
    services/spark.sh), since this machine's paths need not exist where they run.
    """
    return {"SPARK_LOCAL_DIRS": str(folder), "TMPDIR": str(folder)}
