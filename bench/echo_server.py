"""A bare echo endpoint on the same WSGI server and thread count as a node: the HTTP ceiling."""

from __future__ import annotations

import sys

from flask import Flask, jsonify, request
from waitress import serve


def main() -> None:
    port, threads = int(sys.argv[1]), int(sys.argv[2])
    app = Flask("echo")

    @app.post("/echo")
    def echo():  # type: ignore[no-untyped-def]
        return jsonify(request.get_json()), 201

    @app.get("/ready")
    def ready():  # type: ignore[no-untyped-def]
        return "ok"

    serve(app, host="127.0.0.1", port=port, threads=threads, connection_limit=1000, _quiet=True)


if __name__ == "__main__":
    main()
