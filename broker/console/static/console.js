// ToyMB operator console. No libraries, no inline script (the page's CSP forbids both).
// The token lives in sessionStorage and goes only to this origin, in an Authorization header.
"use strict";

(function () {
  const TOKEN_KEY = "toymb.console.token";
  const OVERVIEW = "/console/api/overview";
  const ACTION = "/console/api/bridges/action";
  const HISTORY_MS = 10 * 60 * 1000;   // charts cover the last ten minutes
  const MAX_SAMPLES = 1200;            // and never hold more than this many looks
  const LAG_SERIES = 5;                // groups drawn in the lag chart
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed"];

  const $ = (id) => document.getElementById(id);
  let timer = null;
  let refreshMs = 2000;
  let history = [];                    // [{t, ends: {topic: end}, lags: {"topic/group": lag}}]

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  function headers(extra) {
    const h = Object.assign({ "Accept": "application/json" }, extra || {});
    const t = token();
    if (t) { h["Authorization"] = "Bearer " + t; }
    return h;
  }

  // Relative URLs only: every request goes to the origin that served the page.
  function call(method, path, body) {
    const init = { method: method, headers: headers(body ? { "Content-Type": "application/json" } : null),
                   credentials: "omit", cache: "no-store", redirect: "error", referrerPolicy: "no-referrer" };
    if (body) { init.body = JSON.stringify(body); }
    return fetch(path, init).then((r) => r.json().catch(() => ({})).then((json) => ({ status: r.status, json })));
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }

  function row(cells, cls) {
    const tr = el("tr", null, cls);
    for (const c of cells) {
      const td = el("td");
      if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c === null || c === undefined ? "" : String(c); }
      tr.appendChild(td);
    }
    return tr;
  }

  function fill(id, rows, empty) {
    const body = $(id);
    body.replaceChildren(...rows);
    if (!rows.length) {
      const cols = body.parentElement.querySelectorAll("th").length;
      const tr = el("tr"); const td = el("td", empty, "muted"); td.colSpan = cols; tr.appendChild(td);
      body.appendChild(tr);
    }
  }

  function n(x) { return typeof x === "number" ? x.toLocaleString("en-US") : "–"; }
  // Durations as people read them (status.py's readable_ms says the same); null: the node left cleanly.
  function age(ms) {
    if (ms === null || ms === undefined) return "left (stopped cleanly)";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    const s = Math.floor(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }

  function setStatus(text, cls) { const s = $("status"); s.textContent = text; s.className = "status " + (cls || ""); }

  function showLogin(message) {
    stop();
    $("main").hidden = true;
    $("login").hidden = false;
    $("signout").hidden = true;
    $("login-error").textContent = message || "";
    setStatus(message ? "refused" : "", message ? "bad" : "");
  }

  function showMain() { $("login").hidden = true; $("main").hidden = false; $("signout").hidden = false; }

  function stop() { if (timer !== null) { clearTimeout(timer); timer = null; } }

  function schedule() { stop(); if (!document.hidden) { timer = setTimeout(poll, refreshMs); } }

  function poll() {
    call("GET", OVERVIEW).then(({ status, json }) => {
      if (status === 401 || status === 403) {
        showLogin("Refused (" + status + "): " + (json.message || "this token may not read the console"));
        return;
      }
      if (status !== 200) { setStatus("node answered " + status + (json.message ? ": " + json.message : ""), "bad"); schedule(); return; }
      showMain();
      refreshMs = Math.max(500, json.refresh_ms || 2000);
      remember(json);
      render(json);
      setStatus("updated " + new Date(json.checked_ms).toLocaleTimeString(), "ok");
      schedule();
    }).catch((e) => { setStatus("cannot reach the node (" + e.message + ")", "bad"); schedule(); });
  }

  function remember(o) {
    const ends = {}; const lags = {};
    for (const t of o.topics) { ends[t.name] = t.end; }
    for (const g of o.groups) { lags[g.topic + "/" + g.group] = g.total_lag; }
    history.push({ t: o.checked_ms, ends, lags });
    const cutoff = o.checked_ms - HISTORY_MS;
    while (history.length > MAX_SAMPLES || (history.length && history[0].t < cutoff)) { history.shift(); }
  }

  // Messages per second of each topic between the last two looks.
  function rates() {
    if (history.length < 2) { return {}; }
    const a = history[history.length - 2]; const b = history[history.length - 1];
    const dt = (b.t - a.t) / 1000; const out = {};
    if (dt <= 0) { return out; }
    for (const name in b.ends) { if (name in a.ends) { out[name] = Math.max(0, b.ends[name] - a.ends[name]) / dt; } }
    return out;
  }

  function render(o) {
    $("node").textContent = "node " + o.node;
    renderCluster(o.cluster, o.topics, o.peers || []);
    renderTopics(o.topics, rates(), o.truncated);
    renderGroups(o.groups, o.stuck_after_ms, o.truncated, o.node);
    renderJournal(o.journal);
    renderBridges(o.bridges);
    renderCharts();
  }

  function renderCluster(c, topics, peers) {
    const owned = {};
    for (const t of topics) { owned[t.owner] = (owned[t.owner] || 0) + 1; }
    const silent = peers.filter((p) => !p.ok).map((p) => p.node + ": " + p.error);
    $("cluster-summary").textContent = c.live.length + " live of " + c.nodes.length + ", answered by " + c.answered_by +
      (silent.length ? "; push state unknown from " + silent.join("; ") : "");
    fill("nodes", c.nodes.map((x) => row([x.name, x.alive ? "alive" : "dead", age(x.lease_age_ms), owned[x.name] || 0, x.url],
      "node " + (x.alive ? "alive" : "dead"))), "no nodes registered");
  }

  function renderTopics(topics, rate, truncated) {
    const shown = topics.filter((t) => !topics.some((b) => b.dlq === t.name));  // dead letters show beside their topic
    $("topics-summary").textContent = shown.length + (truncated.topics ? "+ (first shown)" : "");
    fill("topic-rows", shown.map((t) => row([t.name, t.partitions, t.owner + (t.claimed_by && t.claimed_by !== t.owner ? " (claimed by " + t.claimed_by + ")" : ""),
      t.epoch, n(t.end), rate[t.name] === undefined ? "–" : rate[t.name].toFixed(1), t.dlq ? n(t.dlq_depth) : "–"],
      t.dlq_depth ? "topic has-dlq" : "topic")), "no topics");
  }

  function pushText(g, here) {
    if (!g.push) { return g.modes.includes("push") ? "not dispatched now" : "–"; }
    const failing = Object.keys(g.push.failing).length; const backoff = Object.keys(g.push.backoff).length;
    const subs = Object.entries(g.push.subscribers).map(([sid, s]) => sid.slice(0, 8) + (s.unreachable_s !== null ? " unreachable " + s.unreachable_s + " s" : "") + (s.backoff_s ? " backoff " + s.backoff_s + " s" : "") + (s.dead_streak ? " " + s.dead_streak + " dead-lettered" : ""));
    const where = g.dispatched_by && g.dispatched_by !== here ? " (on " + g.dispatched_by + ")" : "";
    if (!failing && !backoff && !subs.length) { return "ok" + where; }
    return [failing ? failing + " failing" : "", backoff ? backoff + " backing off" : "", ...subs].filter(Boolean).join(", ") + where;
  }

  // Subscribers are re-read every few seconds (ROSTER_S on the node): say live or not, not a countdown.
  function lease(s) {
    if (s.revoked) { return "revoked"; }
    if (s.lease_until_ms === null) { return "no lease to renew"; }
    return s.live ? "lease live" : "lease expired";
  }

  function renderGroups(groups, stuckAfter, truncated, here) {
    const stuck = groups.reduce((s, g) => s + g.stuck, 0);
    $("groups-summary").textContent = groups.length + " groups" + (truncated.groups ? "+ (first shown)" : "") + (stuck ? ", " + stuck + " stuck partitions" : "");
    fill("group-rows", groups.map((g) => {
      const subs = g.subscribers.map((s) => s.mode + (s.url ? " " + s.url : "") + " [" + s.partitions + " partitions, " + lease(s) + "]").join("; ");
      const parts = el("span");
      for (const p of g.lagging.slice(0, 8)) {
        const badge = el("span", "p" + p.partition + ": " + n(p.lag) + (p.stuck ? " stuck " + age(p.idle_ms) : ""), p.stuck ? "badge stuck" : "badge");
        badge.title = "committed " + p.committed + ", end " + p.end + (p.subscriber ? ", held by " + p.subscriber : ", unassigned");
        parts.appendChild(badge);
      }
      if (g.lagging_partitions > 8) { parts.appendChild(el("span", "+" + (g.lagging_partitions - 8) + " more", "muted")); }
      const tr = row([g.topic + " / " + g.group, g.modes.join(", ") || "none", subs || "none", n(g.total_lag), g.stuck || "", pushText(g, here), parts],
        "group" + (g.stuck ? " stuck" : ""));
      tr.dataset.group = g.topic + "/" + g.group;
      tr.dataset.lag = String(g.total_lag);
      tr.dataset.stuck = String(g.stuck);
      return tr;
    }), "no groups");
    $("groups").title = "a partition is stuck when it has lag and its committed offset did not move for " + age(stuckAfter);
  }

  function renderJournal(j) {
    $("journal-summary").textContent = n(j.journaled) + " journaled, lag " + n(j.lag);
    const h = j.health;
    let text = "Journal job: no metrics address configured (console_journal_metrics); offsets from the store.";
    let cls = "muted";
    if (h) {
      if (h.reachable && !h.error) {
        const b = Object.entries(h.batches || {}).map(([k, v]) => k + " " + v).join(", ");
        text = "Journal job up: " + n(h.rows) + " rows, batches " + (b || "none") + (h.mean_batch_s !== null ? ", mean batch " + h.mean_batch_s + " s" : "") + ", lag " + n(h.lag);
        cls = "ok";
      } else { text = "Journal job at " + h.url + ": " + (h.error || "down"); cls = "error"; }
    }
    const p = $("journal-health"); p.textContent = text; p.className = cls;
    fill("journal-rows", j.topics.map((r) => row([r.topic, n(r.journaled), n(r.end), n(r.lag)], r.lag ? "journal behind" : "journal")), "no topics");
  }

  function act(endpoint, bridge, action, button) {
    button.disabled = true;
    call("POST", ACTION, { endpoint, bridge, action }).then(({ status, json }) => {
      $("bridge-error").textContent = status === 200 ? "" : action + " " + bridge + " refused (" + status + "): " + (json.message || "");
      if (status !== 200) { button.disabled = false; }   // the rows stay as they are: the button must come back
      poll();
    }).catch((e) => { $("bridge-error").textContent = action + " failed: " + e.message; button.disabled = false; });
  }

  let bridgesShown = null;

  function renderBridges(endpoints) {
    // Unchanged: keep the rows (and their buttons) in place, so a click never lands on a row being replaced.
    const signature = JSON.stringify(endpoints);
    if (signature === bridgesShown) { return; }
    bridgesShown = signature;
    const rows = [];
    for (const e of endpoints) {
      if (!e.reachable) { rows.push(row([e.endpoint, "", "unreachable", e.error || "", ""], "bridge unreachable")); continue; }
      for (const b of e.bridges) {
        const buttons = el("span");
        for (const action of ["pause", "resume"]) {
          const button = el("button", action === "pause" ? "Pause" : "Resume", "action");
          button.type = "button";
          button.dataset.action = action;
          button.disabled = action === "pause" ? b.state !== "STARTED" : b.state !== "PAUSED";
          button.addEventListener("click", () => act(e.endpoint, b.name, action, button));
          buttons.appendChild(button);
        }
        const counts = Object.entries(b.counts).filter(([, v]) => v).map(([k, v]) => k + " " + v).join(", ");
        const tr = row([e.endpoint + " / " + b.name, b.kind, b.state, counts + (b.last_error ? " — " + b.last_error : ""), buttons],
          "bridge state-" + b.state.toLowerCase());
        tr.dataset.bridge = e.endpoint + "/" + b.name;
        tr.dataset.state = b.state;
        rows.push(tr);
      }
    }
    fill("bridge-rows", rows, "no bridge management address configured (console_bridges)");
  }

  function renderCharts() {
    const minutes = history.length > 1 ? ((history[history.length - 1].t - history[0].t) / 60000).toFixed(1) + " min" : "moments";
    $("window").textContent = minutes;
    const rateSeries = [];
    for (let i = 1; i < history.length; i++) {
      const a = history[i - 1]; const b = history[i]; const dt = (b.t - a.t) / 1000; let sum = 0;
      for (const name in b.ends) { if (name in a.ends) { sum += Math.max(0, b.ends[name] - a.ends[name]); } }
      rateSeries.push([b.t, dt > 0 ? sum / dt : 0]);
    }
    draw($("rate-chart"), [{ color: COLORS[0], points: rateSeries }]);
    const last = history.length ? history[history.length - 1].lags : {};
    const top = Object.keys(last).sort((x, y) => last[y] - last[x]).slice(0, LAG_SERIES);
    const series = top.map((key, i) => ({ key, color: COLORS[i % COLORS.length],
      points: history.filter((h) => key in h.lags).map((h) => [h.t, h.lags[key]]) }));
    draw($("lag-chart"), series);
    const legend = $("lag-legend");
    legend.replaceChildren(...series.map((s) => { const item = el("span", s.key, "key"); item.style.borderColor = s.color; return item; }));
  }

  function draw(canvas, series) {
    const ctx = canvas.getContext("2d");
    const w = canvas.width; const h = canvas.height; const pad = 34;
    ctx.clearRect(0, 0, w, h);
    const points = series.flatMap((s) => s.points);
    ctx.strokeStyle = "#cbd5e1"; ctx.lineWidth = 1;
    ctx.strokeRect(pad, 6, w - pad - 6, h - pad + 14);
    ctx.fillStyle = "#64748b"; ctx.font = "11px sans-serif";
    if (!points.length) { ctx.fillText("collecting…", pad + 8, h / 2); return; }
    const t0 = Math.min(...points.map((p) => p[0])); const t1 = Math.max(...points.map((p) => p[0]), t0 + 1);
    const top = Math.max(1, ...points.map((p) => p[1]));
    ctx.fillText(String(Math.round(top)), 2, 14);
    ctx.fillText("0", 2, h - pad + 20);
    ctx.fillText(Math.round((t1 - t0) / 1000) + " s", w - 40, h - 4);
    const x = (t) => pad + (t - t0) / (t1 - t0) * (w - pad - 8);
    const y = (v) => h - pad + 18 - v / top * (h - pad + 8);
    for (const s of series) {
      ctx.strokeStyle = s.color; ctx.lineWidth = 2; ctx.beginPath();
      s.points.forEach((p, i) => { if (i) { ctx.lineTo(x(p[0]), y(p[1])); } else { ctx.moveTo(x(p[0]), y(p[1])); } });
      ctx.stroke();
    }
  }

  function start() { history = []; bridgesShown = null; setStatus("connecting…"); poll(); }

  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const value = $("token").value.trim();
      $("token").value = "";
      if (value) { sessionStorage.setItem(TOKEN_KEY, value); } else { sessionStorage.removeItem(TOKEN_KEY); }
      start();
    });
    $("signout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); history = []; bridgesShown = null; showLogin(""); });
    // A hidden tab does not poll: the node pays only for consoles someone looks at.
    document.addEventListener("visibilitychange", () => { if (document.hidden) { stop(); } else if (!$("main").hidden) { poll(); } });
    if (token()) { start(); } else { showLogin(""); }
  });
})();
