"""Push state is held by the node that dispatches each group (its topic's owner): the console asks
the other live nodes for theirs, so one page shows the whole cluster's push failures and backoffs.

The addresses are the nodes' own registrations in the shared store (as for forwarding), never a
request's; the call carries the cluster token (a node's own call), answers are read up to
:data:`~broker.console.remote.MAX_ANSWER_BYTES` with a short timeout, and a node that does not answer
is named in ``peers`` with the reason, while the rest of the overview stands.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..cluster.forward import CLUSTER_TOKEN_HEADER
from .remote import READ_TIMEOUT_S, RemoteError, Remotes

if TYPE_CHECKING:
    from ..node import Node

PUSH_PATH = "/console/api/push"
MAX_PEERS = 16   # asked in parallel; more nodes than this are not asked
PushState = dict[tuple[str, str], dict[str, Any]]


def local_push_state(node: Node) -> list[dict[str, Any]]:
    """This node's push state as JSON rows (``GET /console/api/push``)."""
    states = node.delivery.dispatcher.push_state()
    return [{"topic": t, "group": g, **state} for (t, g), state in sorted(states.items())]


def _clean(rows: Any) -> PushState:
    """Peer rows with the expected shape only (a peer runs the same code, but may be another version)."""
    out: PushState = {}
    if not isinstance(rows, list):
        raise RemoteError("answered without a push list")
    for row in rows[:10_000]:
        if not isinstance(row, dict) or not isinstance(row.get("topic"), str) or not isinstance(row.get("group"), str):
            continue
        out[(row["topic"], row["group"])] = {k: row.get(k) if isinstance(row.get(k), dict) else {}
                                             for k in ("failing", "backoff", "subscribers")}
    return out


def cluster_push_state(node: Node, remotes: Remotes) -> tuple[dict[tuple[str, str], tuple[str, dict[str, Any]]],
                                                              list[dict[str, Any]]]:
    """Every live node's push state: (topic, group) -> (node name, state), and how each node answered."""
    merged = {pair: (node.name, state) for pair, state in node.delivery.dispatcher.push_state().items()}
    peers = [(r.name, r.url) for r in node.membership.view.rows if r.alive and r.name != node.name][:MAX_PEERS]
    token = node.settings.cluster_token
    headers = {CLUSTER_TOKEN_HEADER: token} if token else {}
    report: list[dict[str, Any]] = []
    if not peers:
        return merged, report

    def ask(url: str) -> PushState:
        status, body = remotes.get_json(url.rstrip("/") + PUSH_PATH, headers, READ_TIMEOUT_S)
        if status != 200:
            hint = " (set the same cluster_token on every node)" if status in (401, 403) else ""
            raise RemoteError(f"answered {status}{hint}")
        return _clean(body.get("push") if isinstance(body, dict) else None)

    with ThreadPoolExecutor(max_workers=len(peers), thread_name_prefix="toymb-console-peer") as pool:
        futures = [(name, pool.submit(ask, url)) for name, url in peers]
        for name, future in futures:
            try:
                state = future.result()
            except RemoteError as exc:
                report.append({"node": name, "ok": False, "error": str(exc)})
                continue
            report.append({"node": name, "ok": True, "error": None})
            merged.update({pair: (name, s) for pair, s in state.items()})
    return merged, report
