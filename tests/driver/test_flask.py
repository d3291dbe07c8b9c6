"""The Flask integration, inside a real Flask app served on a port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask
from werkzeug.serving import make_server

from driver import Message, NotFound, Template, ToyMB
from tests.support import NodeProcess, free_port, wait_until


@pytest.fixture
def served_app(node: NodeProcess, topic: str) -> Iterator[tuple[Flask, ToyMB, list[Message], str]]:
    port = free_port()
    app = Flask("shop")
    app.config.update(TOYMB_URLS=node.url, TOYMB_ADVERTISE_URL=f"http://127.0.0.1:{port}")
    mb = ToyMB(app)
    got: list[Message] = []

    @app.get("/orders/count")
    def count() -> dict[str, int]:  # the host app's own routes keep working
        return {"count": len(got)}

    @mb.subscribe(topic=topic, group="shop")
    def on_order(message: Message) -> None:
        got.append(message)

    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield app, mb, got, f"http://127.0.0.1:{port}"
    finally:
        mb.stop()
        server.shutdown()
        server.server_close()


def test_flask_app_receives_pushes_once_it_serves(served_app: tuple[Flask, ToyMB, list[Message], str],
                                                  template: Template, topic: str) -> None:
    app, mb, got, base = served_app
    assert mb.wait_registered(30)
    (membership,) = mb.memberships
    assert membership.url == base + "/toymb/push"
    assert membership.subscriber_id.startswith("shop.")
    for n in range(3):
        template.send(topic, "c-1", {"n": n})
    wait_until(lambda: len(got) == 3, timeout=30, what="three pushes into the Flask app")
    assert [m.body["n"] for m in got] == [0, 1, 2]
    assert requests.get(base + "/orders/count", timeout=5).json() == {"count": 3}
    assert app.extensions["toymb"] is mb
    mb.stop()  # what SIGTERM and interpreter exit do
    assert template.group_info(topic, "shop")["subscribers"] == []


FLASK_APP = '''
import sys

from flask import Flask
from waitress import serve

from driver import Message, ToyMB

port, topic = int(sys.argv[1]), sys.argv[2]
app = Flask("shop")
app.config["TOYMB_ADVERTISE_URL"] = f"http://127.0.0.1:{port}"  # node URLs come from TOYMB_URLS
mb = ToyMB(app)


@mb.subscribe(topic=topic, group="web")
def on_order(message: Message) -> None:
    print("got", message.body, flush=True)


serve(app, host="127.0.0.1", port=port)
'''


def test_flask_app_under_waitress_deregisters_on_sigterm(node: NodeProcess, template: Template, topic: str,
                                                          tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(FLASK_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOYMB_")}
    env["TOYMB_URLS"] = node.url
    port = free_port()
    proc = subprocess.Popen([sys.executable, "shop.py", str(port), topic], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        def registered() -> bool:
            if proc.poll() is not None:
                return True
            try:
                return bool(template.group_info(topic, "web")["subscribers"])
            except NotFound:
                return False

        wait_until(registered, timeout=30, what="the Flask app registered")
        assert proc.poll() is None
        template.send(topic, None, "order-1")
        wait_until(lambda: template.group_info(topic, "web")["total_lag"] == 0, timeout=30, what="delivery")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "got order-1" in out, out
    assert proc.returncode == -signal.SIGTERM  # the default SIGTERM action still ends the process
    assert template.group_info(topic, "web")["subscribers"] == []
