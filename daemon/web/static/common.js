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
    const setConn = (state) => { if (conn) { conn.dataset.state = state; conn.textContent = state; } };
    const es = new EventSource("/api/events");
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

  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac", "#86bc86", "#d37295", "#a0cbe8", "#ffbe7d", "#8cd17d"];

  return {el, svg, pct, num, money, time, age, counts, clear, showError, getJSON, live, finite,
    PALETTE};
})();
