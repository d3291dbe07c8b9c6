"""Exceptions of the JMS bridge (under the journal package's root, ``JournalError``)."""

from __future__ import annotations

from ..errors import JournalError


class JmsError(JournalError):
    """Root of the JMS bridge's errors."""


class JmsConfigError(JmsError):
    """An invalid bridge configuration, found at startup."""


class JmsConnectionError(JmsError):
    """The JMS broker cannot be reached, refused a frame, or dropped the connection."""


class BridgeFailed(JmsError):
    """A bridge spent its ``max-retries`` and stopped; it can be started again."""
