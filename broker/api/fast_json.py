"""Flask's JSON answers through orjson: every publish acknowledgement and fetched batch goes through here.

Anything orjson cannot write the way the standard library does goes to Flask's own provider:
integers beyond 64 bits, strings holding a lone surrogate, objects only Flask knows how to
write, and indented output (``compact=False`` or debug).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson
from flask import Response
from flask.json.provider import DefaultJSONProvider
from werkzeug.sansio.response import Response as BaseResponse

from ..outcomes import Stored

# Writes a Stored's fields in order, as a JSON object, natively: the same bytes as orjson writes
# from Stored.answer()'s dict (both escape only '"', '\\' and control characters, and write
# other characters as UTF-8).
_STORED_ENCODER = msgspec.json.Encoder()


def answer_bytes(value: Any) -> bytes:
    """The body of a JSON answer holding ``value`` (plain JSON types), as the app's ``jsonify`` writes it."""
    try:
        return orjson.dumps(value) + b"\n"
    except TypeError:  # a big integer or a lone surrogate: written as Flask's provider writes them
        return json.dumps(value, separators=(",", ":")).encode("ascii") + b"\n"


class FastJSONProvider(DefaultJSONProvider):
    """Compact JSON in insertion order, written by orjson, with Flask's provider as the fallback."""

    sort_keys = False

    def response(self, *args: Any, **kwargs: Any) -> BaseResponse:
        if self.compact is False or (self.compact is None and self._app.debug):
            return super().response(*args, **kwargs)
        try:
            body = orjson.dumps(self._prepare_response_obj(args, kwargs))
        except TypeError:  # orjson.JSONEncodeError too: a big integer, a lone surrogate, an unknown type
            return super().response(*args, **kwargs)
        return Response(body + b"\n", mimetype=self.mimetype)  # the app's response_class, untyped there


def stored_answer_bytes(is_batch: bool, stored: list[Stored]) -> bytes:
    """The body of the answer of a publish stored at ``stored``: what :func:`answer_bytes` writes
    from :meth:`broker.publish.Publisher.answer_body`'s, without a dict per message (making them
    cost a batched publish's answer twice its encoding)."""
    try:
        return _STORED_ENCODER.encode({"messages": stored} if is_batch else stored[0]) + b"\n"
    except UnicodeEncodeError:  # a lone surrogate in a client's id: written as answer_bytes writes it
        return answer_bytes({"messages": [s.answer() for s in stored]} if is_batch else stored[0].answer())
