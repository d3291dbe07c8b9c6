"""Enrichers: per-topic plug-ins that may rewrite a message before it is stored."""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points
from typing import Any, ClassVar

import msgspec
import orjson

from .envelope import is_json_type
from .errors import ConfigError
from .strict_json import strict_json

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "toymb.enrichers"


class TopicEnricher:
    """Base class of an enricher.

    ``init()`` is called once when the node starts. ``enrich(message)`` receives the message as a
    dict (``id``, ``key``, ``headers``, ``content_type`` and ``body`` or ``body_base64``) and
    returns the dict to store. Raising rejects the publish with 422 and nothing is stored.
    """

    def init(self) -> None:
        """Prepare resources; called once at startup."""

    def enrich(self, message: dict[str, Any]) -> dict[str, Any]:
        return message


class TypedEnricher(TopicEnricher):
    """An enricher whose topic's bodies are JSON objects of one type, as ToyMB's ``EnrichableTopic``.

    Set ``body_type`` to a dataclass or a ``msgspec.Struct`` and override :meth:`enrich_body`.
    The broker decodes the body into that type, calls ``enrich_body``, and stores the result
    encoded back as JSON, in the body's own form: a JSON body stays JSON, and a text body holding
    JSON (what ToyMB's driver sends to ``/sendmessage``) stays text. A body that does not decode
    is refused with 422, the message naming the field (``$.total``).
    """

    body_type: ClassVar[type[Any]]

    def enrich_body(self, body: Any) -> Any:
        """Return the body to store: ``body`` (an instance of ``body_type``) or a new one."""
        return body

    def enrich(self, message: dict[str, Any]) -> dict[str, Any]:
        if "body" not in message:
            raise ValueError(f"the body is binary, not a JSON {self.body_type.__name__}")
        raw = message["body"]
        as_text = isinstance(raw, str) and not is_json_type(str(message.get("content_type", "")))
        try:
            value = strict_json(raw.encode("utf-8")) if as_text else raw
        except ValueError as exc:
            raise ValueError(f"the body is not JSON: {exc}") from None
        try:
            body = msgspec.convert(value, self.body_type)
        except msgspec.ValidationError as exc:
            raise ValueError(f"the body is not a {self.body_type.__name__}: {exc}") from None
        encoded = msgspec.to_builtins(self.enrich_body(body))
        message["body"] = orjson.dumps(encoded).decode("utf-8") if as_text else encoded
        return message


def _load(target: str) -> type[TopicEnricher]:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load enricher {target!r}: {exc}") from exc
    if not callable(getattr(cls, "enrich", None)):
        raise ConfigError(f"enricher {target!r} has no enrich(message) method")
    return cls  # type: ignore[no-any-return]


def load_enrichers(configured: tuple[str, ...]) -> dict[str, list[TopicEnricher]]:
    """Instantiate and ``init()`` every enricher: from ``topic=module:Class`` settings, then entry points.

    An entry point is named after its topic, ``orders = mypkg.enrich:OrderEnricher``.
    """
    result: dict[str, list[TopicEnricher]] = {}
    pairs = [tuple(item.split("=", 1)) for item in configured]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        pairs.append((ep.name, ep.value))
    for topic, target in pairs:
        instance = _load(target.strip())()
        try:
            instance.init()
        except Exception as exc:
            raise ConfigError(f"enricher {target!r} failed in init(): {exc}") from exc
        result.setdefault(topic.strip(), []).append(instance)
        log.info("enricher %s registered for topic %s", target, topic)
    return result
