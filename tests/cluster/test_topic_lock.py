"""A writer that froze while holding a topic's row lock does not hold the topic past its lease.

Two stores on one database stand for two nodes. The first locks the topic in an append
transaction and then does nothing more, as a node stopped by SIGSTOP (or a long GC pause) would.
The second must get the lock once the lease has passed, and the frozen transaction must not
commit afterwards: its rows would land under a claim that is no longer its own.
"""

from __future__ import annotations

import pytest

from broker.store import Store, TopicClaim
from broker.store.errors import STORE_ERROR, STORE_UNAVAILABLE
from tests.cluster.harness import private_database
from tests.support import wait_until

LEASE_MS = 1000


@pytest.fixture(params=["postgresql", "mariadb"])
def server_url(request: pytest.FixtureRequest) -> str:
    return private_database(request.getfixturevalue("mariadb_url" if request.param == "mariadb" else "pg_url"))


def test_a_frozen_lock_holder_loses_the_topic_after_its_lease_and_cannot_commit(server_url: str) -> None:
    frozen, other = Store(server_url), Store(server_url)
    try:
        frozen.create_schema()
        frozen.ensure_topic("orders", 1)
        with pytest.raises(STORE_ERROR), frozen.append_transaction() as held:
            assert held.lock_topic("orders", LEASE_MS) == TopicClaim(None, 0)

            def take_over() -> bool:
                try:
                    with other.append_transaction() as txn:
                        claim = txn.lock_topic("orders", LEASE_MS)
                        assert claim is not None
                        return txn.claim_topic("orders", "toymb-2", claim)
                except STORE_UNAVAILABLE:
                    return False  # still waiting for the frozen holder (lock wait timeout)

            assert wait_until(take_over, timeout=60, interval=0.2, what="the topic's lock freed")
            # The frozen writer wakes up and goes on with its transaction: the database ended it.
            held.write([], {("orders", 0): 1}, [])
        assert frozen.end_offsets("orders") == {0: 0}, "nothing of the frozen transaction was committed"
        topic = other.get_topic("orders")
        assert topic is not None and (topic.owner, topic.epoch) == ("toymb-2", 1)
    finally:
        frozen.dispose()
        other.dispose()
