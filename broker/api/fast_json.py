"""Flask's JSON answers through orjson: every publish acknowledgement and fetched batch goes through here.

Anything orjson cannot write the way the standard library does goes to Flask's own provider:
integers beyond 64 bits, strings holding a lone surrogate, objects only Flask knows how to
write, and indented output (``compact=False`` or debug).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from flask import Response
from flask.json.provider import DefaultJSONProvider
from werkzeug.sansio.response import Response as BaseResponse


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
