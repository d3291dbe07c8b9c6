"""The one naming rule of ToyMB, shared by the broker, the driver and the journal.

Topic and group names: 1 to 200 of ``A-Z a-z 0-9 . _ -``. Subscriber ids may also hold ``:`` and
``@``. Checks use ``fullmatch``: with ``match``, ``$`` would also accept a trailing newline, and
``"orders\\n"`` would pass as a name of its own.
"""

from __future__ import annotations

import re
from typing import TypeGuard

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,200}$"
SUBSCRIBER_ID_PATTERN = r"^[A-Za-z0-9._:@-]{1,200}$"
_NAME = re.compile(NAME_PATTERN)
_SUBSCRIBER_ID = re.compile(SUBSCRIBER_ID_PATTERN)


def is_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a valid topic or group name."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def is_subscriber_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a valid subscriber id."""
    return isinstance(value, str) and _SUBSCRIBER_ID.fullmatch(value) is not None
