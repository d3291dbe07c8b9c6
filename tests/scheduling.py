"""How ``pytest -n`` (pytest-xdist, ``--dist loadgroup``) spreads this suite: longest work first.

The run is as long as its busiest worker. So the long tests start first,
and the run ends on short tests spread over every worker. ``tests/conftest.py`` sorts the
collection by ``expected_seconds``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

# What the longest tests took in a CI run (`make test`: -n 4 on 2 cores, so about twice their time
# alone), by test function name; a parametrized test's figure is the sum over its parameters. Only
# the order of the run depends on these: a test missing here counts as SLOW_S if marked slow, else
# FAST_S; a stale figure only makes the order less good.
LONG_POLES_S = {
    "test_schemathesis_finds_nothing": 320,   # 30 operations, a test each
    # The mean of the last two CI runs (ci14, ci15 of 2026-11-26), rounded.
    # Was two tests (220 s standalone cluster, 110 s local[*]), each filling its store and draining it.
    "test_sigkill_of_driver_and_worker_leaves_every_message_exactly_once": 250,
    "test_standby_takes_over_from_a_sigkilled_leader_three_times": 170,
    # These two start a private Spark cluster too (kills on local and on the cluster in turn): 179 s
    # and 158 s in the fresh-clone CI of 2026-11-27 (adff192).
    "test_sigkilled_journal_routes_each_message_exactly_once": 180,
    # Was two tests (145 s JetStream, 130 s JMS), each starting the journal job four times.
    "test_journal_job_sigkilled_three_times_during_jms_and_jetstream_egress": 160,
    "test_a_to_b_exactly_once_through_two_job_kills_and_a_restart_of_b": 125,
    # The docker group's first test carries the images' build and the cluster's start (88-249 s).
    "test_publishes_through_every_node_reach_a_push_subscriber_on_the_compose_network": 175,
    "test_the_journal_keeps_its_table_and_routes_orders_to_kafka": 90,
    "test_down_and_up_keeps_the_data": 75,
    "test_killing_the_owner_container_fails_over_and_loses_nothing_acked": 20,
    "test_restarting_postgres_answers_503_not_500_and_recovers": 15,
    "test_activemq_killed_during_a_stream": 80,
    "test_replay_after_wiping_the_store_restores_the_topic": 75,
    "test_a_paused_former_leader_cannot_commit": 65,
    "test_hostile_values_in_every_position_of_every_route": 55,
    "test_idle_toymb_push_subscribers_cost_nothing_and_expire_when_pushes_find_nobody": 50,
    "test_forwarded_long_polls_past_the_cap_are_answered_at_once_and_the_node_stays_responsive": 45,
    "test_journal_over_a_database_server": 32,
    "test_slow_receivers_do_not_delay_other_subscribers_or_publishers": 31,
    "test_the_reference_decodes_what_python_encodes": 21,
}
SLOW_S, FAST_S = 15.0, 0.7


def function_of(nodeid: str) -> tuple[str, str]:
    """(``path::function``, function name) of a test id, without parameters or xdist's ``@group``."""
    if nodeid.rfind("@") > nodeid.rfind("]"):  # xdist's own test (a parameter may hold an "@")
        nodeid = nodeid.rsplit("@", 1)[0]
    function = nodeid.split("[", 1)[0]
    return function, function.rsplit("::", 1)[-1]


def expected_seconds(nodeids: Iterable[str], slow: Iterable[str] = ()) -> dict[str, float]:
    """What each test is expected to take under `make test`; ``slow`` holds the ids marked slow."""
    ids = list(nodeids)
    marked = set(slow)
    parameters = Counter(function_of(nodeid)[0] for nodeid in ids)
    expected = {}
    for nodeid in ids:
        function, name = function_of(nodeid)
        figure = LONG_POLES_S.get(name)
        if figure is not None:
            expected[nodeid] = figure / parameters[function]
        else:
            expected[nodeid] = SLOW_S if nodeid in marked else FAST_S
    return expected

