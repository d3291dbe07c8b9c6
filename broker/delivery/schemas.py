"""OpenAPI component schemas of delivery options, seek, nack, extend and secret rotation (issue 21)."""

from __future__ import annotations

from typing import Any

from ..api.docs import NONNEG, SID_SCHEMA, obj
from ..config import Settings
from .options import FORMATS, MAX_ATTEMPTS, MAX_BACKOFF_MS, MAX_FILTER_CHARS, MAX_OVERLAP_MS
from .pull import MAX_EXTEND_MS

_SECRET = {"type": "string", "pattern": "^whsec_[A-Za-z0-9+/=]{22,88}$",
           "description": "Standard Webhooks secret: whsec_ and base64 of 16 to 64 bytes"}


def delivery_schemas(s: Settings) -> dict[str, Any]:
    """The schemas; ``Subscription`` replaces the basic one with the delivery options."""
    positions = {"type": "array", "minItems": 1, "maxItems": 1000,
                 "items": obj({"partition": NONNEG, "offset": NONNEG}, ("partition", "offset"), closed=True)}
    offsets_map = {"type": "object", "additionalProperties": NONNEG,
                   "description": "partition number (as a string) -> offset"}
    partitions = {"type": "array", "items": NONNEG}
    return {
        "Subscription": obj({
            "mode": {"type": "string", "enum": ["push", "pull"]},
            "url": {"type": "string", "description": "push only: http(s) URL allowed by push_allow"},
            "id": SID_SCHEMA,
            "start": {"type": "string", "enum": ["latest", "earliest"]},
            "filter": {"type": "string", "minLength": 1, "maxLength": MAX_FILTER_CHARS,
                       "description": "the group's filter: msg.key, msg.id, msg.header.H with ==, != or ^= "
                                      "(prefix), && and ||, parentheses; fixed once set"},
            "dead_letter": obj({"max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS},
                                "min_backoff_ms": {"type": "integer", "minimum": 0, "maximum": MAX_BACKOFF_MS},
                                "max_backoff_ms": {"type": "integer", "minimum": 0, "maximum": MAX_BACKOFF_MS}},
                               closed=True, description="the group's dead-letter policy"),
            "format": {"type": "string", "enum": list(FORMATS), "description": "push only: the push body"},
            "secret": {**_SECRET, "description": "push only: the signing secret to use (else one is made)"},
            "new_secret": {"type": "boolean", "description": "push only: make a new secret and return it"},
            "secret_overlap_ms": {"type": "integer", "minimum": 0, "maximum": MAX_OVERLAP_MS,
                                  "description": "push only: how long the previous secret stays valid"},
            "signing": {"type": "boolean", "description": "push only: false sends pushes unsigned (default true)"},
        }, ("mode",), closed=True),
        "Nack": obj({"subscriber": SID_SCHEMA, "messages": positions}, ("subscriber", "messages"), closed=True),
        "Rewound": obj({"subscriber": SID_SCHEMA, "rewound": partitions}, ("subscriber", "rewound")),
        "Extend": obj({"subscriber": SID_SCHEMA, "messages": positions,
                       "extend_ms": {"type": "integer", "minimum": 0, "maximum": MAX_EXTEND_MS}},
                      ("subscriber", "messages"), closed=True),
        "Extended": obj({"subscriber": SID_SCHEMA, "extended": partitions, "extend_ms": NONNEG},
                        ("subscriber", "extended")),
        "Seek": obj({"to": {"type": "string", "enum": ["earliest", "latest"]},
                     "timestamp": {"type": "integer", "minimum": 0, "maximum": (1 << 53) - 1,
                                   "description": "ms since the epoch: the first message at or after it"},
                     "offsets": offsets_map,
                     "partitions": {"type": "array", "minItems": 1, "maxItems": s.max_partitions, "items": NONNEG}},
                    closed=True, oneOf=[{"required": ["to"]}, {"required": ["timestamp"]}, {"required": ["offsets"]}]),
        "Sought": obj({"topic": {"type": "string"}, "group": {"type": "string"}, "offsets": offsets_map},
                      ("topic", "group", "offsets")),
        "Rotate": obj({"secret": _SECRET, "overlap_ms": {"type": "integer", "minimum": 0, "maximum": MAX_OVERLAP_MS}},
                      closed=True),
        "Rotated": obj({"subscriber_id": SID_SCHEMA, "secret": _SECRET,
                        "previous_valid_until_ms": NONNEG}, ("subscriber_id", "previous_valid_until_ms")),
    }
