// One agent's page: figures now, equity and drawdown curves, allocation over time, model usage,
// and every decision with its audit trail (reason, raw answer, input hash, headlines, calls,
// each call's exact prompt rebuilt on demand).
"use strict";

(() => {
  const {el, svg, pct, num, money, time, counts, clear, getJSON, live, finite, PALETTE} = PA;
  const PAGE = 20;
  const agent = decodeURIComponent(location.pathname.replace(/\/+$/, "").split("/").pop() || "");
  const base = `/api/agents/${encodeURIComponent(agent)}`;
  let offset = 0;
  let total = 0;
  document.getElementById("agent-id").textContent = agent;
  document.title = `paperarena: ${agent}`;

  // Line charts drawn by the vendored uPlot (static/vendor/, MIT); rebuilt on every reload.
  const plots = [];

  /** A line chart of [ts, y] points: a box, and a function drawing it once the box is placed. */
  function lineChart(points, {title, fmt, color}) {
    const box = el("div", {class: "chart-box agent-chart", "data-chart": title}, el("p", {class: "note"}, title));
    const draw = () => {
      if (!points.length) { box.append(el("p", {class: "note"}, "no data yet")); return; }
      const width = Math.max(200, box.clientWidth || 400);
      plots.push(new uPlot({
        width, height: 180, scales: {x: {time: true}}, cursor: {points: {size: 5}},
        axes: [{}, {values: (u, ticks) => ticks.map(fmt), size: 64}],
        series: [{value: (u, ts) => (finite(ts) ? time(ts) : "-")},
          {label: title, stroke: color, width: 1.6, value: (u, y) => fmt(y)}],
      }, [points.map((p) => p[0]), points.map((p) => p[1])], box));
    };
    return [box, draw];
  }

  /** Stacked bars of the weights after each fill. */
  function allocationChart(fills, labels) {
    const W = 460, H = 170, L = 62, R = 10, T = 22, B = 26;
    const box = svg("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img"});
    const label = svg("text", {x: L, y: 14, class: "title"});
    label.textContent = "allocation after each rebalance";
    box.append(label);
    const held = (f) => Object.entries(f.weights || {}).filter(([, w]) => Number(w) > 0.0005).map(([a]) => a);
    const assets = [...new Set(fills.flatMap(held))].sort((a, b) => (a === "CASH") - (b === "CASH") || a.localeCompare(b));
    const n = Math.max(1, fills.length);
    const bw = (W - L - R) / n;
    fills.forEach((f, i) => {
      let acc = 0;
      assets.forEach((a, j) => {
        const w = Math.max(0, Number((f.weights || {})[a]) || 0);
        if (!w) return;
        const h = w * (H - T - B);
        const r = svg("rect", {x: (L + i * bw).toFixed(1), y: (H - B - acc - h).toFixed(1), width: Math.max(0.5, bw - (bw > 3 ? 1 : 0)).toFixed(1), height: h.toFixed(1), fill: a === "CASH" ? "#c9ced6" : PALETTE[j % PALETTE.length]});
        const tip = svg("title", {});
        tip.textContent = `${time(f.scheduled_ts)} ${PA.assetText(a, labels, 200)} ${PA.share(w)}`;
        r.append(tip);
        box.append(r);
        acc += h;
      });
    });
    for (const [y, v] of [[T, "100%"], [H - B, "0%"]]) {
      const t = svg("text", {x: L - 4, y: y + 4, "text-anchor": "end", class: "axis"});
      t.textContent = v;
      box.append(t);
    }
    const legend = el("div", {class: "legend"}, ...assets.slice(0, 20).map((a, j) => el("span", {},
      el("i", {class: "swatch", "data-color": j}), PA.assetEl(a, labels, 30))));
    legend.querySelectorAll("i.swatch").forEach((s) => {
      const j = Number(s.dataset.color);
      s.style.background = assets[j] === "CASH" ? "#c9ced6" : PALETTE[j % PALETTE.length];
    });
    return [box, legend];
  }

  function renderCharts(data) {
    while (plots.length) plots.pop().destroy();
    const root = clear(document.getElementById("charts"));
    const draws = [];
    const markets = [...new Set([...(data.current || []).map((c) => c.market), ...(data.equity || []).map((e) => e.market)])];
    for (const market of markets) {
      const eq = (data.equity || []).filter((e) => e.market === market && finite(e.value)).sort((a, b) => a.ts - b.ts);
      const pts = eq.map((e) => [e.ts, e.value]);
      let peak = -Infinity;
      const dd = pts.map(([t, v]) => { peak = Math.max(peak, v); return [t, peak > 0 ? Math.min(0, v / peak - 1) : 0]; });
      const fills = (data.allocations || []).filter((f) => f.market === market).sort((a, b) => a.scheduled_ts - b.scheduled_ts);
      const [alloc, legend] = allocationChart(fills, data.assets);
      const [equityBox, drawEquity] = lineChart(pts, {title: "equity (USD)", fmt: money, color: "#4e79a7"});
      const [ddBox, drawDd] = lineChart(dd, {title: "drawdown from peak", fmt: (x) => (finite(x) ? PA.share(x) : "-"), color: "#e15759"});
      draws.push(drawEquity, drawDd);
      root.append(el("div", {class: "market-charts", "data-market": market},
        el("h2", {}, `${market}`),
        el("div", {class: "chart-row"}, equityBox, ddBox, el("div", {}, alloc, legend))));
    }
    draws.forEach((draw) => draw());
  }

  function renderCurrent(data) {
    const body = clear(document.querySelector("#current tbody"));
    for (const c of data.current || []) {

      body.append(el("tr", {"data-market": c.market},
        el("td", {}, c.market), el("td", {class: "num"}, money(c.value)), el("td", {class: "num"}, pct(c.return_ratio)),
        el("td", {class: finite(c.drawdown) && c.drawdown >= c.limit ? "num warn" : "num"}, pct(c.drawdown).replace("+", "")),
        el("td", {class: "num"}, pct(c.limit).replace("+", "")), el("td", {class: "num"}, pct(c.cash_ratio).replace("+", "")),
        el("td", {class: `status s-${c.status}`}, c.status, c.reason ? el("div", {class: "why"}, c.reason) : null),
        el("td", {class: "text", "data-field": "weights"}, ...PA.weightList(c.weights, data.assets))));
    }
    const llm = clear(document.querySelector("#llm tbody"));
    for (const u of data.llm || []) {
      llm.append(el("tr", {}, el("td", {}, u.market), el("td", {class: "num"}, u.calls), el("td", {class: "num"}, u.tokens_in),
        el("td", {class: "num"}, u.tokens_out), el("td", {class: "num"}, num(u.cost_usd, 4))));
    }
    if (!(data.llm || []).length) llm.append(el("tr", {}, el("td", {colspan: 5}, "no model calls (not an LLM agent, or none yet)")));
  }

  /** PortBench's stage scores, the stress gate and the agent's run group, from the board. */
  function renderProtocol(board) {
    const section = document.getElementById("protocol");
    const root = clear(document.getElementById("protocol-body"));
    const pb = ((board && board.portbench) || {})[agent];
    const gate = ((board && board.stress_gate) || {})[agent];
    const groups = ((board && board.run_groups) || []).filter((g) => (g.agents || []).includes(agent));
    section.hidden = !(pb || gate || groups.length);
    // a mean that is not a number: pending while decisions wait for their horizon, else "-"
    const score = (x, waiting) => (finite(x) ? num(x, 3) : waiting ? "pending" : "-");
    if (pb) {
      const stages = ["S1", "S2", "S3", "S4", "S5"];
      root.append(el("table", {id: "portbench-scores"},
        el("thead", {}, el("tr", {}, ...[...stages, "CEPS", "decisions", "pending", "failed"].map((h) => el("th", {}, h)))),
        el("tbody", {}, el("tr", {},
          ...stages.map((s) => el("td", {class: "num", "data-field": s}, finite(pb[s]) ? num(pb[s], 3) : pb[`${s}_pending`] ? `pending (${pb[`${s}_pending`]})` : "-")),
          el("td", {class: "num", "data-field": "CEPS"}, score(pb.CEPS, pb.pending)),
          el("td", {class: "num", "data-field": "decisions"}, pb.decisions),
          el("td", {class: "num", "data-field": "pending"}, pb.pending),
          el("td", {class: "num", "data-field": "failed"}, pb.failed)))),
        el("p", {class: "why"}, "PortBench stage scores: mean over the scored decisions (horizon 5 daily closes); pending: the horizon has not passed."));
    }
    if (gate) {
      const verdict = gate.pass === true ? "pass" : gate.pass === false ? "FAIL" : "-";
      root.append(el("p", {id: "stress-gate"}, `stress gate (max drawdown within the ${gate.profile || "?"} profile's tolerance ${pct(gate.tolerance).replace("+", "")}): `,
        el("b", {}, verdict), ` (max drawdown ${pct(gate.max_drawdown).replace("+", "")})`));
    }
    for (const g of groups) {
      const f = g.figures || {};
      const spread = (s, fmt) => (s && finite(s.mean) ? `${fmt(s.mean)} ± ${fmt(s.std)} [${fmt(s.min)}, ${fmt(s.max)}]` : "-");
      root.append(el("p", {class: "run-group", "data-market": g.market}, `run group ${g.group} (${g.market}, ${g.runs} runs: ${(g.agents || []).join(", ")}): return `,
        spread(f.cumulative_return, pct), ", Sharpe ", spread(f.sharpe, (x) => num(x, 2))));
    }
  }

  // Prompts rebuilt on demand (GET .../prompt), kept across live redraws: decision key -> answer.
  const prompts = new Map();
  const shown = new Set();

  /** A button showing call `i`'s exact prompt, as text, and the box it goes in. */
  function promptBox(d, i) {
    const key = `${d.market}|${d.scheduled_ts}`;
    const box = el("div", {class: "prompt", "data-key": key, "data-call": i});
    // The box on the page now (a live update may have redrawn the decisions meanwhile).
    const current = () => [...document.querySelectorAll("#decisions .prompt")]
      .find((b) => b.dataset.key === key && b.dataset.call === String(i)) || box;
    const show = (answer, into) => {
      clear(into);
      const p = (answer.prompts || [])[i];
      if (p && typeof p.prompt === "string") into.append(el("pre", {class: "raw prompt-text"}, p.prompt));
      else into.append(el("div", {class: "error-text"}, (p && p.error) || answer.error || "no prompt"));
    };
    const button = el("button", {type: "button", class: "show-prompt", "data-call": i}, "show prompt");
    button.addEventListener("click", async () => {
      shown.add(`${key}|${i}`);
      button.disabled = true;
      try {
        if (!prompts.has(key)) {
          prompts.set(key, await getJSON(`${base}/prompt?market=${encodeURIComponent(d.market)}&scheduled_ts=${encodeURIComponent(d.scheduled_ts)}`));
        }
        show(prompts.get(key), current());
      } catch (e) {
        const into = current();
        clear(into);
        into.append(el("div", {class: "error-text"}, String((e && e.message) || e)));
      }
      button.disabled = false;
    });
    if (shown.has(`${key}|${i}`) && prompts.has(key)) show(prompts.get(key), box);
    return [button, box];
  }

  function audit(d) {
    const parts = [];
    for (const r of d.reasoning || []) {
      parts.push(el("div", {class: "reasoning", "data-step": r.step}, (d.reasoning.length > 1 ? el("b", {}, `${r.step}: `) : null), r.text));
    }
    if (d.reason) parts.push(el("div", {class: "reason"}, d.reason));
    const key = `${d.market}|${d.scheduled_ts}`;
    const details = el("details", {class: "audit", "data-key": key}, el("summary", {}, `audit: input ${d.input_sha256 ? d.input_sha256.slice(0, 12) : "-"}${d.calls.length ? `, ${d.calls.length} call${d.calls.length > 1 ? "s" : ""}` : ""}`));
    details.append(el("div", {}, "input SHA-256: ", el("code", {class: "hash"}, d.input_sha256 || "-"), d.template_version ? ` · prompt ${d.template_version}` : ""));
    if (d.headlines.length) {
      details.append(el("div", {class: "label"}, "headlines in the input"),
        el("ul", {class: "headlines"}, ...d.headlines.map((h) => el("li", {}, el("span", {class: "when"}, time(h.ts)), ` [${h.key}] `, h.headline, h.source ? ` (${h.source})` : ""))));
    }
    d.calls.forEach((c, i) => {
      const step = c.step ? `step ${c.step}` : `call ${i + 1}`;
      details.append(el("div", {class: "label"}, `${step}${c.outcome ? " [" + c.outcome + "]" : ""} (attempt ${c.attempt}) · ${c.model || "?"} · ${finite(c.tokens_in) ? c.tokens_in : "-"} in / ${finite(c.tokens_out) ? c.tokens_out : "-"} out tokens · ${finite(c.cost_usd) ? "$" + num(c.cost_usd, 5) : "cost -"} · ${finite(c.latency_s) ? num(c.latency_s, 2) + " s" : "-"}${c.finish_reason ? " · " + c.finish_reason : ""}`));
      details.append(...promptBox(d, i));
      if (c.error) details.append(el("div", {class: "error-text"}, c.error));
      if (c.raw_response) details.append(el("pre", {class: "raw"}, c.raw_response));
    });
    if (d.raw_output && !d.calls.some((c) => c.raw_response === d.raw_output)) {
      details.append(el("div", {class: "label"}, "raw answer"), el("pre", {class: "raw"}, d.raw_output));
    }
    parts.push(details);
    return parts;
  }

  function renderDecisions(page) {
    total = page.total || 0;
    const body = document.querySelector("#decisions tbody");
    const open = new Set([...body.querySelectorAll("details[open]")].map((d) => d.dataset.key));
    clear(body);
    for (const d of page.decisions || []) {
      const alloc = d.allocation && typeof d.allocation === "object" ? PA.weightList(d.allocation, page.assets, 6) : ["-"];
      body.append(el("tr", {class: `outcome o-${d.outcome}`, "data-ts": d.scheduled_ts},
        el("td", {}, time(d.scheduled_ts)), el("td", {}, d.market),
        el("td", {class: `o o-${d.outcome}`}, d.outcome), el("td", {class: "text"}, ...alloc),
        el("td", {class: "text"}, ...audit(d)),
        el("td", {class: "num"}, d.attempts), el("td", {class: "num"}, `${num(d.duration_s, 2)} s`)));
    }
    body.querySelectorAll("details").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
    if (!(page.decisions || []).length) body.append(el("tr", {}, el("td", {colspan: 7}, "no decisions yet")));
    const pages = Math.max(1, Math.ceil(total / PAGE));
    document.getElementById("page").textContent = `page ${Math.floor(offset / PAGE) + 1} of ${pages} (${total} decisions)`;
    document.getElementById("newer").disabled = offset <= 0;
    document.getElementById("older").disabled = offset + PAGE >= total;
  }

  const signed = (x) => (finite(x) ? `${x >= 0 ? "+" : "-"}${money(Math.abs(x))}` : "-");
  const units = (x) => (finite(x) ? (Math.abs(x) >= 100 ? x.toFixed(2) : x.toPrecision(4)) : "-");
  const price = (x) => (finite(x) ? (x < 10 ? x.toFixed(4) : money(x)) : "-");

  function renderPositions(data) {
    const body = clear(document.querySelector("#positions tbody"));
    for (const p of data.positions || []) {
      body.append(el("tr", {"data-market": p.market, "data-asset": p.asset},
        el("td", {}, p.market), el("td", {class: "text"}, PA.assetEl(p.asset, data.assets)),
        el("td", {class: "num", "data-field": "units"}, units(p.units)), el("td", {class: "num"}, price(p.avg_price)),
        el("td", {class: "num"}, price(p.price)), el("td", {class: "num"}, money(p.value)),
        el("td", {class: finite(p.unrealized_pnl) && p.unrealized_pnl < 0 ? "num neg" : "num pos"}, signed(p.unrealized_pnl)),
        el("td", {class: "num"}, PA.share(p.weight))));
    }
    if (!(data.positions || []).length) body.append(el("tr", {}, el("td", {colspan: 8}, "no open positions (all cash)")));
  }

  let tradesOffset = 0;
  let tradesTotal = 0;
  async function loadTrades() {
    const page = await getJSON(`${base}/trades?offset=${tradesOffset}&limit=${PAGE}`);
    if (page && page.error) throw new Error(page.error);
    tradesTotal = page.total || 0;
    const body = clear(document.querySelector("#trades tbody"));
    for (const t of page.trades || []) {
      body.append(el("tr", {"data-market": t.market, "data-asset": t.asset, "data-ts": t.ts},
        el("td", {}, time(t.ts)), el("td", {}, t.market), el("td", {class: "text"}, PA.assetEl(t.asset, page.assets)),
        el("td", {class: `side-${t.side}`}, t.side), el("td", {class: "num", "data-field": "units"}, units(t.units)),
        el("td", {class: "num"}, price(t.price)), el("td", {class: "num"}, money(t.fee)),
        el("td", {class: finite(t.realized_pnl) && t.realized_pnl < 0 ? "num neg" : "num"}, signed(t.realized_pnl))));
    }
    if (!(page.trades || []).length) body.append(el("tr", {}, el("td", {colspan: 8}, "no trades yet")));
    const pages = Math.max(1, Math.ceil(tradesTotal / PAGE));
    document.getElementById("trades-page").textContent = `page ${Math.floor(tradesOffset / PAGE) + 1} of ${pages} (${tradesTotal} trades)`;
    document.getElementById("trades-newer").disabled = tradesOffset <= 0;
    document.getElementById("trades-older").disabled = tradesOffset + PAGE >= tradesTotal;
  }

  async function loadDecisions() {
    const page = await getJSON(`${base}/decisions?offset=${offset}&limit=${PAGE}`);
    if (page && page.error) throw new Error(page.error);
    renderDecisions(page);
  }

  async function load() {
    const data = await getJSON(`${base}?limit=5000`);
    if (data && data.error) throw new Error(data.error);
    PA.showError("");
    renderCurrent(data);
    renderCharts(data);
    const positions = await getJSON(`${base}/positions`).catch(() => null);
    if (positions && !positions.error) renderPositions(positions);
    await loadTrades();
    renderProtocol(await getJSON("/api/leaderboard").catch(() => null));
    const status = await getJSON("/api/status").catch(() => null);
    if (status && !status.error) PA.renderHealth(status);
    await loadDecisions();
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }

  document.getElementById("trades-newer").addEventListener("click", () => { tradesOffset = Math.max(0, tradesOffset - PAGE); loadTrades().catch((e) => PA.showError(String(e.message || e))); });
  document.getElementById("trades-older").addEventListener("click", () => { if (tradesOffset + PAGE < tradesTotal) { tradesOffset += PAGE; loadTrades().catch((e) => PA.showError(String(e.message || e))); } });
  document.getElementById("newer").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); loadDecisions().catch((e) => PA.showError(String(e.message || e))); });
  document.getElementById("older").addEventListener("click", () => { if (offset + PAGE < total) { offset += PAGE; loadDecisions().catch((e) => PA.showError(String(e.message || e))); } });

  // Reload when the stream names this agent, a resolution moved its book or prices moved.
  live(load, null, (msg) => (msg.recent || []).some((r) => r.agent === agent || r.type === "resolution") || Boolean((msg.counts || {}).mark));
})();
