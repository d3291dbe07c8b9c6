"""The push subscriber the container test runs on the compose network (``toymb consume compose_subscriber``).

It prints one line per delivery, which the test reads from the container's log.
"""

from driver import Message, subscribe


@subscribe(topic="orders", group="compose-check", start="earliest")
def received(message: Message) -> None:
    print("received", message.id, flush=True)
