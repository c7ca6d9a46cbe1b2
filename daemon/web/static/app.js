// The leaderboard page: per-market tables as `paperarena report`, feed health, live activity.
"use strict";

(() => {
  const {el, pct, num, money, time, age, counts, clear, getJSON, live, finite} = PA;
  const MAX_ACTIVITY = 60;
  let lastStatus = null;
  let assetNames = {};
  let tradeCounts = {};
  let lastBoard = {};

  /** Why a market has nothing ranked yet, and when its next round is due (from /api/status). */
  function emptyReason(market, marks) {
    const r = ((lastStatus && lastStatus.rounds) || {})[market] || {};
    const next = finite(r.next_ts) ? ` The next ${market} round is due ${PA.time(r.next_ts)} (${PA.inOrAgo(r.next_ts - lastStatus.clock)}).` : "";
    const why = !r.last_ts ? "no decision round has run yet" : !marks ? "no agent has been marked yet (a mark follows each round and each market close)" : "every agent is still provisional (too few valid decisions or scored days)";
    return `Nothing ranked yet: ${why}.${next}`;
  }

  function isProvisional(row) { return Boolean(row.provisional); }
  function provisionalReason(row) {
    if (typeof row.provisional === "string") return row.provisional;
    return row.provisional_reason || row.reason || "";
  }
  /** The key of a per-agent valid-decision rate (e.g. `valid_decision_rate`), when the board has one. */
  function rateKey(rows) {
    for (const r of rows) {
      for (const k of Object.keys(r)) {
        if (/^valid.*(rate|ratio|share)$/.test(k) && (finite(r[k]) || r[k] === null)) return k;
      }
    }
    return null;
  }

  const COLUMNS = [
    ["return", "cumulative_return", pct],
    ["95% CI", "cumulative_return_ci", (ci) => (Array.isArray(ci) && ci.length === 2 && finite(ci[0]) ? `[${pct(ci[0])}, ${pct(ci[1])}]` : "-")],
    ["sharpe", "sharpe", (x) => num(x)],
    ["sortino", "sortino", (x) => num(x)],
    ["max dd", "max_drawdown", PA.share],
    ["vol", "volatility", PA.share],
    ["win", "win_rate", PA.share],
    ["turnover", "mean_turnover", (x) => num(x)],
    ["days", "days", (x) => (finite(x) ? String(x) : "-")],
    ["trades", "trades", (x) => (finite(x) ? String(x) : "-")],
    ["fees", "costs", money],
    ["model $", "llm_cost_usd", (x) => (finite(x) ? num(x, 4) : "-")],
    ["decisions", "decisions", counts],
  ];
  const TITLES = {max_drawdown: "largest fall from a peak (a loss, unsigned)", trades: "rebalances that traded",
    costs: "trading costs paid (USD)", llm_cost_usd: "model calls' cost (USD)"};

  // Filters and sorting, kept across live updates.
  const view = {market: "all", search: "", sortKey: null, sortDir: -1};
  function sortValue(r, key) {
    const v = r[key];
    if (Array.isArray(v)) return finite(v[0]) ? v[0] : null;
    if (v && typeof v === "object") return Object.values(v).reduce((a, b) => a + (Number(b) || 0), 0);
    return finite(v) ? v : typeof v === "string" ? v : null;
  }
  function sortRows(rows) {
    if (!view.sortKey) return rows;
    return [...rows].sort((a, b) => {
      const x = sortValue(a, view.sortKey), y = sortValue(b, view.sortKey);
      if (x === null || y === null) return (x === null) - (y === null);
      return (x < y ? -1 : x > y ? 1 : 0) * view.sortDir;
    });
  }
  function applyFilters() {
    const q = view.search.trim().toLowerCase();
    for (const sec of document.querySelectorAll("section.board, section.market-chart")) {
      sec.hidden = view.market !== "all" && sec.dataset.market !== view.market;
    }
    for (const tr of document.querySelectorAll("table.leaderboard tbody tr")) {
      tr.hidden = Boolean(q) && !(tr.dataset.agent || "").toLowerCase().includes(q);
    }
    for (const b of document.querySelectorAll("#market-tabs button")) b.classList.toggle("on", b.dataset.market === view.market);
  }
  function renderTabs(markets) {
    const tabs = document.getElementById("market-tabs");
    const have = [...tabs.querySelectorAll("button")].map((b) => b.dataset.market).join("|");
    const want = ["all", ...markets];
    if (have !== want.join("|")) {
      clear(tabs);
      for (const m of want) {
        const b = el("button", {type: "button", class: "toggle", "data-market": m}, m);
        b.addEventListener("click", () => { view.market = m; applyFilters(); });
        tabs.append(b);
      }
    }
  }

  function renderBoards(board) {
    lastBoard = board;
    const root = document.getElementById("boards");
    clear(root);
    const rows = Array.isArray(board.rows) ? board.rows : [];
    const liveRows = Array.isArray(board.live) ? board.live : [];
    const markets = [...new Set([...Object.keys(board.markets || {}), ...rows.map((r) => r.market), ...liveRows.map((r) => r.market)])];
    const regime = document.getElementById("regime");
    regime.textContent = board.regime && board.regime.label && board.regime.index_days > 0
      ? `regime: ${board.regime.label} (equal-weight index ${pct(board.regime.index_return)} over ${board.regime.index_days} days)`
      : "regime: not known yet (it needs daily marks of the equity market)";
    for (const market of markets) {
      const mrows = rows.filter((r) => r.market === market).map((r) => ({...r, trades: ((tradeCounts[market] || {})[r.agent]) || 0}));
      const ranked = mrows.filter((r) => !isProvisional(r));
      const prov = mrows.filter(isProvisional);
      const rk = rateKey(mrows);
      const info = (board.markets || {})[market] || {};
      const head = el("tr", {}, el("th", {}, "#"), el("th", {}, "agent"),
        ...COLUMNS.map(([label, key]) => {
          const th = el("th", {class: "sortable", "data-sort": key, title: TITLES[key] || `sort by ${label}`,
            "aria-sort": view.sortKey === key ? (view.sortDir > 0 ? "ascending" : "descending") : null},
          label, view.sortKey === key ? (view.sortDir > 0 ? " ▲" : " ▼") : "");
          th.addEventListener("click", () => {
            if (view.sortKey === key) view.sortDir = -view.sortDir; else { view.sortKey = key; view.sortDir = -1; }
            renderBoards(lastBoard);
          });
          return th;
        }),
        rk ? el("th", {title: "share of valid decisions"}, "valid") : null,
        el("th", {title: "mark-to-market value now"}, "value"), el("th", {title: "current drawdown from the peak / the agent's limit"}, "dd / limit"), el("th", {}, "status"));
      const body = el("tbody");
      const liveOf = (agent) => liveRows.find((l) => l.agent === agent && l.market === market) || {};
      const addRow = (r, provisional) => {
        const lv = liveOf(r.agent);
        const rank = provisional ? "—" : (finite(r.rank) ? `${r.rank}${r.tied_with_next ? "~" : ""}` : "-");
        const tr = el("tr", {"data-agent": r.agent, "data-market": market, class: provisional ? "provisional" : null},
          el("td", {"data-field": "rank", class: "rank", title: PASIG.stabilityTitle(r) || null}, rank),
          el("td", {"data-field": "agent"}, el("a", {href: `/agent/${encodeURIComponent(r.agent)}`}, r.agent),
            provisional ? el("span", {class: "badge", title: provisionalReason(r)}, "provisional") : null,
            provisional && provisionalReason(r) ? el("div", {class: "why"}, provisionalReason(r)) : null),
          ...COLUMNS.map(([, key, f]) => el("td", {"data-field": key, class: key === "decisions" ? "counts" : "num"}, f(r[key]))),
          rk ? el("td", {"data-field": rk, class: "num"}, pct(r[rk]).replace("+", "")) : null,
          el("td", {"data-field": "live_value", class: "num"}, money(lv.value)),
          el("td", {"data-field": "live_drawdown", class: finite(lv.drawdown) && finite(lv.limit) && lv.drawdown >= lv.limit ? "num warn" : "num",
            title: "current drawdown from the peak / the agent's limit"},
          finite(lv.drawdown) ? `${pct(lv.drawdown).slice(1)} / ${pct(lv.limit).slice(1)}` : "-"),
          el("td", {"data-field": "status", class: `status s-${lv.status || "unknown"}`}, lv.status || "-"));
        body.append(tr);
      };
      sortRows(ranked).forEach((r) => addRow(r, false));
      sortRows(prov).forEach((r) => addRow(r, true));
      // Agents running but not yet on the leaderboard (no marks yet).
      for (const lv of liveRows.filter((l) => l.market === market && !mrows.some((r) => r.agent === l.agent))) {
        addRow({agent: lv.agent, market, provisional: "no marks yet"}, true);
      }
      const best = info.best_asset ? `best asset ${PA.assetText(info.best_asset, assetNames, 50)} ${pct(info.best_asset_return)}` : "";
      root.append(el("section", {class: "board", "data-market": market},
        el("h2", {}, market, el("span", {class: "meta"}, `${finite(info.marks) ? info.marks : 0} marks${best ? " · " + best : ""}`)),
        PASIG.mcsBand(info, el),
        ranked.length ? null : el("p", {class: "note empty-why", "data-market": market}, emptyReason(market, info.marks)),
        el("div", {class: "scroll"}, el("table", {class: "leaderboard", "data-market": market}, el("thead", {}, head), body))));
    }
    renderTabs(markets);
    applyFilters();
    if (!markets.length) {
      const due = Object.keys((lastStatus && lastStatus.rounds) || {}).map((m) => emptyReason(m, 0));
      root.append(el("p", {class: "note empty-why"}, due.length ? due.join(" ") : "No agents yet."));
    }
  }

  function renderStatus(st) {
    PA.renderHealth(st);
    lastStatus = st;
    const sources = clear(document.querySelector("#sources tbody"));
    for (const s of st.sources || []) {
      sources.append(el("tr", {"data-source": s.name},
        el("td", {}, s.name),
        el("td", {class: `state st-${s.state}`}, s.state),
        el("td", {}, `${s.market || "all"}${s.market_open === false ? " (closed)" : ""}`),
        el("td", {}, age(s.data_age_s)),
        el("td", {class: "num"}, finite(s.reconnects) ? s.reconnects : "-")));
    }
    if (!(st.sources || []).length) sources.append(el("tr", {}, el("td", {colspan: 5}, "no sources")));
    const rounds = clear(document.querySelector("#rounds tbody"));
    for (const [market, r] of Object.entries(st.rounds || {})) {
      rounds.append(el("tr", {"data-market": market},
        el("td", {}, market),
        el("td", {}, r.last_ts ? `${time(r.last_ts)} (${age(r.last_age_s)})` : "none yet"),
        el("td", {}, counts(r.last_outcomes)),
        el("td", {class: r.missed ? "num warn" : "num"}, r.missed || 0),
        el("td", {class: r.skipped ? "num warn" : "num"}, r.skipped || 0)));
    }
    const flags = clear(document.getElementById("flags"));
    for (const a of st.agents || []) {
      if (a.status && a.status !== "active") {
        flags.append(el("li", {class: "warn"}, `${a.agent} (${a.market}) ${a.status}${a.reason ? ": " + a.reason : ""}`));
      }
    }
    const clock = document.getElementById("clock");
    if (finite(st.clock)) clock.textContent = time(st.clock);
  }

  function addActivity(msg) {
    const list = document.getElementById("activity");
    for (const ev of msg.recent || []) {
      const moved = [ev.bought ? `bought ${ev.bought} asset${ev.bought > 1 ? "s" : ""}` : "", ev.sold ? `sold ${ev.sold}` : ""].filter(Boolean).join(", ");
      const what = ev.type === "fill" ? (ev.traded_value > 0 ? `${moved || "traded"} for ${money(ev.traded_value)}, value ${money(ev.value_after)}` : `kept its holdings, value ${money(ev.value_after)}`)
        : ev.type === "decision" ? ev.outcome
          : ev.type === "resolution" ? `question ${ev.question_id} resolved`
            : `${ev.kind || ""} ${ev.severity || ""}`;
      const li = el("li", {class: `ev ev-${ev.type}`, "data-type": ev.type, "data-agent": ev.agent || ""},
        el("span", {class: "when"}, time(ev.ts)), " ",
        el("span", {class: "kind"}, ev.type), " ",
        ev.agent ? el("a", {href: `/agent/${encodeURIComponent(ev.agent)}`}, ev.agent) : null,
        ev.market ? ` ${ev.market} ` : " ", what,
        ev.reason ? el("div", {class: "reason"}, ev.reason) : null,
        ev.message ? el("div", {class: "reason"}, ev.message) : null);
      list.prepend(li);
    }
    while (list.children.length > MAX_ACTIVITY) list.removeChild(list.lastChild);
  }

  async function load() {
    const [board, status, chart] = await Promise.all([getJSON("/api/leaderboard"), getJSON("/api/status"), getJSON("/api/chart")]);
    if (status && !status.error) renderStatus(status);
    if (chart && !chart.error) {
      assetNames = chart.assets || {};
      tradeCounts = chart.trades || {};
      PACHART.render(document.getElementById("market-charts"), chart);
    }
    if (board && board.error) {
      PA.showError(`leaderboard: ${board.error}`);
      renderBoards({live: board.live || []});
    } else {
      PA.showError("");
      renderBoards(board || {});
    }
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }

  document.getElementById("search").addEventListener("input", (ev) => { view.search = ev.target.value; applyFilters(); });
  live(load, addActivity);
})();
