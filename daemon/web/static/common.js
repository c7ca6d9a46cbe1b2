// Shared helpers of the paperarena page. Plain JavaScript, no build step, no third-party code.
// Every text that comes from the API is inserted as a text node (never as HTML).
"use strict";

const PA = (() => {
  /** Create an element; string or number children become text nodes. */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = String(v);
      else e.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  /** Create an SVG element with attributes. */
  function svg(tag, attrs) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  const finite = (x) => typeof x === "number" && Number.isFinite(x);
  const pct = (x) => (finite(x) ? `${x >= 0 ? "+" : "-"}${Math.abs(x * 100).toFixed(2)}%` : "-");
  const num = (x, d = 2) => (finite(x) ? x.toFixed(d) : "-");
  const money = (x) => (finite(x) ? x.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2}) : "-");

  function time(ts) {
    if (!finite(ts)) return "-";
    return new Date(ts * 1000).toISOString().slice(0, 16).replace("T", " ") + "Z";
  }

  function age(s) {
    if (!finite(s)) return "never";
    if (s < 90) return `${Math.round(s)} s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    if (s < 172800) return `${(s / 3600).toFixed(1)} h ago`;
    return `${(s / 86400).toFixed(1)} d ago`;
  }

  function counts(obj) {
    return Object.entries(obj || {}).sort().map(([k, v]) => `${k}=${v}`).join(", ") || "-";
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function showError(text) {
    const e = document.getElementById("error");
    if (!e) return;
    e.hidden = !text;
    e.textContent = text || "";
  }

  async function getJSON(url) {
    const r = await fetch(url, {headers: {Accept: "application/json"}});
    let body = null;
    try { body = await r.json(); } catch (_) { body = null; }
    if (!r.ok && !(body && typeof body === "object")) throw new Error(`${url}: HTTP ${r.status}`);
    return body;
  }

  /**
   * Call `load` now and whenever the daemon's event stream says something changed; one call at a
   * time, the next one only after it finished (no polling, no request storm). `wants(msg)`, when
 * given, decides whether a message calls for a reload.
   */
  function live(load, onMessage, wants) {
    let running = false;
    let again = false;
    async function refresh() {
      if (running) { again = true; return; }
      running = true;
      try { await load(); } catch (err) { showError(String(err.message || err)); }
      running = false;
      if (again) { again = false; refresh(); }
    }
    const conn = document.getElementById("conn");
    const STREAM = {live: "updating", reconnecting: "reconnecting", connecting: "connecting"};
    const setConn = (state) => {
      if (conn) { conn.dataset.state = state; conn.textContent = STREAM[state] || state; }
    };
    const es = new EventSource("/api/events");
    // A page left (or kept in the back-forward cache) closes its stream: a browser holds only
    // six connections per host, and streams left open would block the next page's requests.
    window.addEventListener("pagehide", () => es.close());
    window.addEventListener("pageshow", (ev) => { if (ev.persisted) location.reload(); });
    es.addEventListener("open", () => setConn("live"));
    es.addEventListener("error", () => setConn("reconnecting"));
    es.addEventListener("hello", () => refresh());
    es.addEventListener("update", (ev) => {
      let msg = null;
      try { msg = JSON.parse(ev.data); } catch (_) { return; }
      const clock = document.getElementById("clock");
      if (clock && msg && finite(msg.clock)) clock.textContent = time(msg.clock);
      if (onMessage) onMessage(msg);
      if (!wants || wants(msg)) refresh();
    });
    refresh();
    return {refresh, source: es};
  }

  /**
   * The data's state from /api/status's sources (never from the page's own stream): "live" when
   * every source is live or its market closed and one is live, "stale" when some are not,
   * "no data" when none is live, "closed" when none is live and every market is closed,
   * "read-only" for `paperarena serve`, "no sources" when the process has none (a replay).
   */
  function dataState(st) {
    const sources = (st && st.sources) || [];
    if (st && st.read_only) return "read-only";
    if (!sources.length) return "no sources";
    const live = sources.filter((s) => s.state === "live").length;
    if (!live) return sources.every((s) => s.market_open === false) ? "closed" : "no data";
    return sources.every((s) => s.state === "live" || s.market_open === false) ? "live" : "stale";
  }

  /** "in 12 min" / "3 h ago" from seconds ahead (negative: past). */
  function inOrAgo(s) {
    if (!finite(s)) return "";
    const a = Math.abs(s);
    const txt = a < 90 ? `${Math.round(a)} s` : a < 5400 ? `${Math.round(a / 60)} min` : a < 172800 ? `${(a / 3600).toFixed(1)} h` : `${(a / 86400).toFixed(1)} d`;
    return s >= 0 ? `in ${txt}` : `${txt} ago`;
  }

  /** One line: sources live out of all, each one that is not and its last data, next rounds. */
  function summaryLine(st) {
    const sources = (st && st.sources) || [];
    const parts = [];
    if (st && st.read_only) parts.push("a stored run served read-only (paperarena serve): no sources, no rounds");
    else if (!sources.length) parts.push("no live sources in this process");
    else {
      const live = sources.filter((s) => s.state === "live");
      parts.push(`${live.length}/${sources.length} sources live`);
      for (const s of sources.filter((x) => x.state !== "live")) {
        parts.push(`${s.name} ${s.state}${s.market_open === false ? " (market closed)" : ""}, last data ${age(s.data_age_s)}`);
      }
    }
    for (const [market, r] of Object.entries((st && st.rounds) || {})) {
      if (finite(r.next_ts)) parts.push(`next ${market} round ${time(r.next_ts)} (${inOrAgo(r.next_ts - st.clock)})`);
    }
    return parts.join(" · ");
  }

  /** Set the header's data badge and the summary line from /api/status. */
  function renderHealth(st) {
    const badge = document.getElementById("badge");
    const state = dataState(st);
    if (badge) { badge.dataset.state = state; badge.textContent = state; }
    const line = document.getElementById("summary");
    if (line) line.textContent = summaryLine(st);
    renderSandbox(st, line);
    return state;
  }

  /** A banner above the summary while strategy code runs without a sandbox layer. */
  function renderSandbox(st, line) {
    let banner = document.getElementById("sandbox-warning");
    const sb = st.sandbox || {};
    if (sb.state !== "degraded") {
      if (banner) banner.remove();
      return;
    }
    if (!banner) {
      banner = el("p", {id: "sandbox-warning", class: "error", role: "alert"});
      if (line && line.parentNode) line.parentNode.insertBefore(banner, line);
      else document.body.prepend(banner);
    }
    const missing = Object.entries(sb.missing || {}).map(([k, v]) => `${k} (${v})`).join("; ");
    banner.textContent = `Sandbox DEGRADED: AlphaForgeBench strategies run without ${missing} ([sandbox] allow_degraded = true).`;
  }

  /** A share of a whole (weights, cash): never signed. */
  const share = (x) => (finite(x) ? `${Math.abs(x * 100).toFixed(2)}%` : "-");

  /** An asset's display name: a Polymarket token's question title (cut to `max`) and side. */
  function assetText(id, labels, max = 40) {
    const l = (labels || {})[id];
    if (!l) return id.length > 16 ? `${id.slice(0, 14)}…` : id;
    const q = l.question.length > max ? `${l.question.slice(0, max - 1)}…` : l.question;
    return `${q} ${l.side}`;
  }

  /** An asset as a span: its short name, the full title and side (or id) on hover. */
  function assetEl(id, labels, max = 40) {
    const l = (labels || {})[id];
    return el("span", {class: "asset", "data-asset": id, title: l ? `${l.question} ${l.side}` : id}, assetText(id, labels, max));
  }

  /** Weights as "name 50.00%, ..." elements, largest first (at most `n`). */
  function weightList(weights, labels, n = 12) {
    const rows = Object.entries(weights || {}).filter(([, w]) => Number(w) > 0.0005).sort((a, b) => b[1] - a[1]).slice(0, n);
    if (!rows.length) return ["-"];
    return rows.flatMap(([a, w], i) => [i ? ", " : null, assetEl(a, labels), ` ${share(w)}`]).filter((x) => x !== null);
  }

  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac", "#86bc86", "#d37295", "#a0cbe8", "#ffbe7d", "#8cd17d"];

  return {el, svg, pct, num, money, time, age, counts, clear, showError, getJSON, live, finite,
    PALETTE, dataState, renderHealth, inOrAgo, share, assetText, assetEl, weightList};
})();
