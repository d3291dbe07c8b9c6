"""The console in a real browser (Debian's chromium, Selenium) against a real 3-node PostgreSQL cluster.

One cluster and one browser serve the module (see conftest.py). Each test signs in through the page
itself, as an operator would, and saves screenshots into the test output.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests

from tests.bridges_jms.conftest import send_all
from tests.cluster.harness import NAMES, Receiver, owner_name
from tests.console.conftest import ADMIN, PUBLISHER, READER, ConsoleCluster, screenshot
from tests.support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WAIT_S = 45.0


def wait_page(driver: Any, what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    """Poll ``check`` (which reads the page) until it is truthy; fail with a screenshot otherwise."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except StaleElementReferenceException:  # the page re-rendered between two reads
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            path = screenshot(driver, f"timeout-{what.replace(' ', '-')[:40]}")
            raise AssertionError(f"the page never showed {what} within {timeout}s (screenshot {path})")
        time.sleep(0.2)


def sign_in(driver: Any, base: str, token: str) -> None:
    """Open the console afresh (no token in this tab) and enter ``token`` in its form."""
    from selenium.webdriver.common.by import By

    driver.get(base + "/console")
    driver.execute_script("sessionStorage.clear()")
    driver.get(base + "/console")
    field = wait_page(driver, "the token form", lambda: _visible(driver, "token"))
    field.send_keys(token)
    driver.find_element(By.ID, "connect").click()


def _visible(driver: Any, element_id: str) -> Any:
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.ID, element_id)
    return element if element.is_displayed() else None


def group_row(driver: Any, key: str) -> dict[str, int] | None:
    from selenium.webdriver.common.by import By

    for row in driver.find_elements(By.CSS_SELECTOR, "#group-rows tr.group"):
        if row.get_attribute("data-group") == key:
            return {"lag": int(row.get_attribute("data-lag")), "stuck": int(row.get_attribute("data-stuck"))}
    return None


def bridge_state(driver: Any, key: str) -> str | None:
    from selenium.webdriver.common.by import By

    for row in driver.find_elements(By.CSS_SELECTOR, "#bridge-rows tr.bridge"):
        if row.get_attribute("data-bridge") == key:
            return row.get_attribute("data-state")
    return None


def publish(c: ConsoleCluster, topic: str, count: int) -> None:
    messages = [{"id": uuid.uuid4().hex, "key": f"k{i}", "body": {"i": i}} for i in range(count)]
    answer = requests.post(f"{c.url}/v1/topics/{topic}/messages", json={"messages": messages},
                           headers={"Authorization": f"Bearer {PUBLISHER}"}, timeout=20)
    assert answer.status_code == 201, answer.text


def test_refused_without_a_token(console_cluster: ConsoleCluster, browser: Any) -> None:
    c = console_cluster
    # The page itself is open (it holds nothing); its data is not.
    page = requests.get(c.url + "/console", timeout=5)
    assert page.status_code == 200 and "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert requests.get(c.url + "/console/api/overview", timeout=5).status_code == 401
    assert c.api("GET", "/console/api/overview", token=PUBLISHER).status_code == 403

    sign_in(browser, c.url, "")
    error = wait_page(browser, "the refusal", lambda: _visible(browser, "login-error") and
                      browser.find_element("id", "login-error").text)
    assert "401" in error
    assert not browser.find_element("id", "main").is_displayed()
    sign_in(browser, c.url, "not-a-token")
    assert "401" in wait_page(browser, "the refusal of a wrong token",
                              lambda: browser.find_element("id", "login-error").text)
    screenshot(browser, "refused-without-token")


def test_a_token_shows_the_three_nodes(console_cluster: ConsoleCluster, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    c = console_cluster
    sign_in(browser, c.url, READER)

    def three_alive() -> list[str] | None:
        rows = browser.find_elements(By.CSS_SELECTOR, "#nodes tr.node.alive")
        names = sorted(r.find_element(By.TAG_NAME, "td").text for r in rows)
        return names if names == sorted(NAMES) else None

    assert wait_page(browser, "three live nodes", three_alive) == sorted(NAMES)
    # The token is kept in this tab's session storage, and never put in the URL.
    assert browser.execute_script("return sessionStorage.getItem('toymb.console.token')") == READER
    assert READER not in browser.current_url
    screenshot(browser, "cluster")


def test_lag_rises_while_the_consumer_is_stopped_and_falls_when_it_resumes(
        console_cluster: ConsoleCluster, browser: Any) -> None:
    c = console_cluster
    topic = "console.orders"
    publish(c, topic, 1)  # creates it (owned by whichever node rendezvous picks)
    with Receiver().running() as receiver:
        pushed = c.api("POST", f"/v1/topics/{topic}/groups/billing/subscribers", token=READER,
                       json={"mode": "push", "url": receiver.url})
        assert pushed.status_code == 201, pushed.text
        pulled = c.api("POST", f"/v1/topics/{topic}/groups/audit/subscribers", token=READER,
                       json={"mode": "pull", "start": "latest"})
        assert pulled.status_code == 201, pulled.text
        sid = pulled.json()["subscriber_id"]
        sign_in(browser, c.url, READER)
        wait_page(browser, "both groups", lambda: group_row(browser, f"{topic}/audit") is not None
                  and group_row(browser, f"{topic}/billing") is not None)

        # The pull consumer is stopped: nothing fetches. Lag rises with each publish.
        publish(c, topic, 40)
        first = wait_page(browser, "lag 40", lambda: (r := group_row(browser, f"{topic}/audit")) and r["lag"] >= 40
                          and r)["lag"]
        publish(c, topic, 60)
        wait_page(browser, "the lag rise", lambda: (r := group_row(browser, f"{topic}/audit")) and r["lag"] > first)
        # The push group keeps up meanwhile.
        wait_page(browser, "the push group at lag 0", lambda: (r := group_row(browser, f"{topic}/billing"))
                  and r["lag"] == 0)
        assert len(receiver.received()) >= 100
        # No progress for a while: its lagging partitions are flagged stuck, in red.
        wait_page(browser, "stuck partitions", lambda: (r := group_row(browser, f"{topic}/audit")) and r["stuck"] > 0)
        assert browser.find_elements("css selector", "#group-rows tr.group.stuck .badge.stuck")
        screenshot(browser, "lag-consumer-stopped")

        # The consumer resumes: it fetches and commits until nothing is left.
        def consume_all() -> bool:
            fetched = c.api("GET", f"/v1/topics/{topic}/groups/audit/messages?subscriber={sid}&max=1000&wait_ms=0",
                            token=READER).json()["messages"]
            if not fetched:
                return True
            offsets: dict[str, int] = {}
            for m in fetched:
                offsets[str(m["partition"])] = max(offsets.get(str(m["partition"]), -1), m["offset"])
            done = c.api("POST", f"/v1/topics/{topic}/groups/audit/offsets", token=READER,
                         json={"subscriber": sid, "offsets": offsets})
            assert done.status_code == 200, done.text
            return False

        while not consume_all():
            pass
        wait_page(browser, "the lag back to 0", lambda: (r := group_row(browser, f"{topic}/audit"))
                  and r["lag"] == 0 and r["stuck"] == 0)
        screenshot(browser, "lag-consumer-resumed")


def test_journal_section_shows_store_offsets_and_the_jobs_health(console_cluster: ConsoleCluster,
                                                                   browser: Any) -> None:
    c = console_cluster
    publish(c, "console.journal", 7)
    sign_in(browser, c.url, READER)
    health = wait_page(browser, "the journal job's health", lambda: "Journal job up" in (
        t := browser.find_element("id", "journal-health").text) and t)
    assert "lag" in health

    seen: list[list[str]] = []

    def journal_row() -> list[str] | None:
        for row in browser.find_elements("css selector", "#journal-rows tr"):
            cells = [td.text for td in row.find_elements("tag name", "td")]
            if cells and cells[0] == "console.journal":
                seen.append(cells)
                return cells
        return None

    # Nothing journaled yet (no Spark job runs here): all 7 are the journal's lag, from the store.
    # The row may first show the topic as it was while the publish was being stored: a node builds
    # its overview at most every 0.5 s, and the previous test's page was still polling it.
    expected = ["console.journal", "0", "7", "7"]
    try:
        wait_page(browser, "the journal row", lambda: journal_row() == expected)
    except AssertionError:
        raise AssertionError(f"the journal row never showed {expected}; it showed {seen[-3:]}") from None


def test_push_failures_on_another_node_show_on_this_ones_page(console_cluster: ConsoleCluster,
                                                              browser: Any) -> None:
    c = console_cluster
    topic = "toymb-2"   # a topic named after a node is owned by it: toymb-2 dispatches, the page asks toymb-1
    assert owner_name(topic) == "toymb-2"
    dead = f"http://127.0.0.1:{free_port()}/push"   # nothing listens there
    publish(c, topic, 3)
    joined = c.api("POST", f"/v1/topics/{topic}/groups/mailer/subscribers", token=READER,
                   json={"mode": "push", "url": dead, "start": "earliest"})
    assert joined.status_code == 201, joined.text
    sign_in(browser, c.url, READER)

    def unreachable_shown() -> str | None:
        for row in browser.find_elements("css selector", "#group-rows tr.group"):
            if row.get_attribute("data-group") == f"{topic}/mailer":
                cells = row.find_elements("tag name", "td")
                return cells[5].text if "unreachable" in cells[5].text else None
        return None

    text = wait_page(browser, "the unreachable push subscriber", unreachable_shown)
    assert "(on toymb-2)" in text
    overview = c.api("GET", "/console/api/overview", token=READER).json()
    group = next(g for g in overview["groups"] if (g["topic"], g["group"]) == (topic, "mailer"))
    assert group["dispatched_by"] == "toymb-2" and group["total_lag"] == 3
    assert all(p["ok"] for p in overview["peers"]) and {p["node"] for p in overview["peers"]} == {"toymb-2", "toymb-3"}
    screenshot(browser, "push-unreachable-on-another-node")


def test_pause_and_resume_the_jms_bridge_from_the_page(console_cluster: ConsoleCluster, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    c = console_cluster
    key = "jms/jms-in"
    # A consume token sees the bridge, but the node refuses its pause.
    sign_in(browser, c.url, READER)
    wait_page(browser, "the bridge started", lambda: bridge_state(browser, key) == "STARTED")
    refused = c.api("POST", "/console/api/bridges/action", token=READER,
                    json={"endpoint": "jms", "bridge": "jms-in", "action": "pause"})
    assert refused.status_code == 403
    _click(browser, key, "pause")
    assert "403" in wait_page(browser, "the refusal", lambda: browser.find_element(By.ID, "bridge-error").text)
    assert c.ingress.state() == "STARTED"

    sign_in(browser, c.url, ADMIN)
    wait_page(browser, "the bridge started", lambda: bridge_state(browser, key) == "STARTED")
    _click(browser, key, "pause")
    wait_page(browser, "the bridge paused", lambda: bridge_state(browser, key) == "PAUSED")
    assert c.ingress.state() == "PAUSED"
    before = _end(c, c.ingress.topic)
    send_all(f"/queue/{c.ingress.queue}", [(b"held while paused", {"persistent": "true"})])
    time.sleep(1.5)
    assert _end(c, c.ingress.topic) == before      # paused: the message waits in ActiveMQ
    screenshot(browser, "bridge-paused")

    _click(browser, key, "resume")
    wait_page(browser, "the bridge started again", lambda: bridge_state(browser, key) == "STARTED")
    assert c.ingress.state() == "STARTED"
    deadline = time.monotonic() + WAIT_S
    while _end(c, c.ingress.topic) <= before:
        assert time.monotonic() < deadline, "the message held while paused never arrived"
        time.sleep(0.2)
    screenshot(browser, "bridge-resumed")


def _click(driver: Any, key: str, action: str) -> None:
    """Click the enabled ``action`` button of bridge ``key`` (found again if the page re-rendered it)."""
    from selenium.webdriver.common.by import By

    def clicked() -> bool:
        for row in driver.find_elements(By.CSS_SELECTOR, "#bridge-rows tr.bridge"):
            if row.get_attribute("data-bridge") == key:
                found = row.find_element(By.CSS_SELECTOR, f"button[data-action='{action}']")
                if found.is_enabled():
                    found.click()
                    return True
        return False

    wait_page(driver, f"an enabled {action} button", clicked)


def _end(c: ConsoleCluster, topic: str) -> int:
    answer = c.api("GET", f"/v1/topics/{topic}", token=ADMIN)
    if answer.status_code == 404:
        return 0
    return sum(int(v) for v in answer.json()["end_offsets"].values())
