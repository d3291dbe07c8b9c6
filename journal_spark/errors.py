"""The journal package's exception tree (one root, so callers can catch everything it raises)."""

from __future__ import annotations


class JournalError(Exception):
    """Root of the errors the journal job and replay raise on purpose."""


class JavaMissing(JournalError):
    """Spark needs a Java runtime and none was found."""


class JournalFailed(JournalError):
    """A streaming query stopped with an error."""


class UnsharedStore(JournalError):
    """The store is a ``memory://`` database, which only its node's process can see."""


class ReplayError(JournalError):
    """The journal could not be read or the target broker refused the messages."""


class PortInUse(JournalError):
    """The journal's /metrics port is taken (by a second journal process on the same machine, say)."""


class TempFolderUnusable(JournalError):
    """The folder of the journal's temporary files (``journal.tmp.dir``) cannot be made or written."""
