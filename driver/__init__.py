"""The ToyMB Python driver: publish with :class:`Template`, consume with :func:`subscribe`.

    from driver import Template, subscribe, Message

    Template().send("orders", "customer-7", {"total": 12})

    @subscribe(topic="orders", group="billing")
    def handle(message: Message) -> None: ...
"""

from __future__ import annotations

from .client import Client, Coordinates, Outgoing, Registered, Template
from .consumer import Consumer
from .errors import (
                     AuthenticationError,
                     BadRequest,
                     ConfigurationError,
                     Conflict,
                     ConnectError,
                     HTTPStatusError,
                     NotFound,
                     PayloadTooLarge,
                     PermissionDenied,
                     RequestTimeout,
                     SerializationError,
                     ToyMBError,
                     TransportError,
                     Unavailable,
                     Unprocessable,
)
from .flask import ToyMB
from .message import Message
from .pull import PullConsumer
from .receiver import PushDispatcher, Receiver, push_wsgi_app
from .subscribe import Subscription, subscribe, subscriptions_in, subscriptions_of

__all__ = [
    "AuthenticationError",
    "BadRequest",
    "Client",
    "ConfigurationError",
    "Conflict",
    "ConnectError",
    "Consumer",
    "Coordinates",
    "HTTPStatusError",
    "Message",
    "NotFound",
    "Outgoing",
    "PayloadTooLarge",
    "PermissionDenied",
    "PullConsumer",
    "PushDispatcher",
    "Receiver",
    "Registered",
    "RequestTimeout",
    "SerializationError",
    "Subscription",
    "Template",
    "ToyMB",
    "ToyMBError",
    "TransportError",
    "Unavailable",
    "Unprocessable",
    "push_wsgi_app",
    "subscribe",
    "subscriptions_in",
    "subscriptions_of",
]
