"""The driver's push receiver checks signatures once it has a secret: tampered, stale or unsigned pushes fail."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import requests
from standardwebhooks.webhooks import Webhook

from driver import Consumer, Message, Template, subscribe
from driver.signatures import SignatureError, Verifier, new_secret, secret_key, signature_headers
from tests.support import NodeProcess, wait_until


def test_own_signatures_verify_with_the_reference_and_the_reference_with_ours() -> None:
    secret = new_secret()
    body = b'{"subscriber_id":"s","messages":[]}'
    ours = signature_headers([secret_key(secret)], "msg_1", body)
    Webhook(secret).verify(body, ours)  # the standardwebhooks package accepts what we sign
    now = dt.datetime.now(tz=dt.UTC)
    reference = {"webhook-id": "msg_2", "webhook-timestamp": str(int(now.timestamp())),
                 "webhook-signature": Webhook(secret).sign("msg_2", now, body.decode())}
    assert Verifier([secret]).verify(reference, body) == "msg_2", "and we accept what it signs"


def test_the_receiver_refuses_tampered_stale_and_unsigned_pushes(node: NodeProcess, template: Template,
                                                                   topic: str) -> None:
    seen: list[Message] = []
    lock = threading.Lock()

    @subscribe(topic=topic, group="signed")
    def handle(message: Message) -> None:
        with lock:
            seen.append(message)

    with Consumer(handle, template=template, app_name="signed") as consumer:
        assert consumer.wait_registered(30)
        template.send(topic, "k", {"n": 1})
        wait_until(lambda: len(seen) == 1, timeout=30, what="a signed push handled")
        sid = consumer.subscriber_ids[0]
        secrets = consumer.dispatcher._secrets[sid]
        assert secrets and secrets[0].startswith("whsec_"), "the broker's secret reached the receiver"
        key = secret_key(secrets[0])
        envelope = {"id": "forged", "topic": topic, "partition": 0, "offset": 99, "key": "k", "headers": {},
                    "timestamp": 0, "content_type": "application/json", "body": {"n": 2}}
        body = json.dumps({"subscriber_id": sid, "topic": topic, "group": "signed",
                           "messages": [envelope]}).encode()

        def post(data: bytes, headers: dict[str, str]) -> int:
            return requests.post(consumer.push_url, data=data, timeout=5,
                                 headers={"Content-Type": "application/json", **headers}).status_code

        signed = signature_headers([key], "msg_x", body)
        assert post(body.replace(b'"n": 2', b'"n": 3'), signed) == 401, "a tampered body is refused"
        stale = signature_headers([key], "msg_x", body, timestamp=int(time.time()) - 600)
        assert post(body, stale) == 401, "a stale timestamp is refused (replay protection)"
        future = signature_headers([key], "msg_x", body, timestamp=int(time.time()) + 600)
        assert post(body, future) == 401
        assert post(body, {}) == 401, "an unsigned push is refused once there is a secret"
        wrong = signature_headers([secret_key(new_secret())], "msg_x", body)
        assert post(body, wrong) == 401
        assert post(body, {**signed, "toymb-subscriber-id": "someone-else"}) == 400
        with lock:
            assert [m.body for m in seen] == [{"n": 1}], "no refused push reached the handler"
        assert post(body, signed) == 200, "the same push, intact and fresh, is handled"
        with lock:
            assert seen[-1].id == "forged"


def test_verifier_rejects_malformed_input() -> None:
    secret = new_secret()
    verifier = Verifier([secret])
    body = b"{}"
    good = signature_headers([secret_key(secret)], "m", body)
    for headers in ({**good, "webhook-timestamp": "12x"}, {**good, "webhook-timestamp": "9" * 40},
                    {**good, "webhook-signature": "v2,abc"}, {**good, "webhook-signature": ""},
                    {k: v for k, v in good.items() if k != "webhook-id"}):
        try:
            verifier.verify(headers, body)
        except SignatureError:
            continue
        raise AssertionError(f"accepted {headers}")
    assert verifier.verify({k.upper(): v for k, v in good.items()}, body) == "m", "header names ignore case"
    for bad in ("secret", "whsec_", "whsec_***", "whsec_QUJD"):
        try:
            Verifier([bad])
        except SignatureError:
            continue
        raise AssertionError(f"accepted secret {bad!r}")
