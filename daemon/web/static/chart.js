// The combined chart: one uPlot chart per market with a line per agent and the benchmark dashed,
// a $/% toggle and 1D/1W/1M/ALL ranges; the legend under the chart shows every series' value at
// the hovered time. uPlot (static/vendor/, MIT) draws on a canvas and sets its legend's labels
// and values as text, so no text from the API is ever parsed as HTML.
"use strict";

const PACHART = (() => {
  const {el, finite, money, pct, PALETTE} = PA;
  const RANGES = [["1D", 86400], ["1W", 7 * 86400], ["1M", 30 * 86400], ["ALL", Infinity]];
  const BENCH = "benchmark (equal weight)";

  /** Merge per-series [[ts, y]] lists onto one sorted time axis (null where a series has no point). */
  function align(lists) {
    const xs = [...new Set(lists.flatMap((pts) => pts.map((p) => p[0])))].sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const ys = lists.map((pts) => {
      const col = new Array(xs.length).fill(null);
      for (const [x, y] of pts) col[index.get(x)] = y;
      return col;
    });
    return [xs, ...ys];
  }

  /** The last value of `col` at or before `idx` (a series between its points holds its value). */
  function held(col, idx) {
    for (let i = idx === null || idx === undefined ? -1 : idx; i >= 0; i--) {
      if (col[i] !== null && col[i] !== undefined) return col[i];
    }
    return null;
  }

  /** One market's chart with its controls; `update(data)` redraws from /api/chart's market entry. */
  class MarketChart {
    constructor(market, root) {
      this.market = market;
      this.mode = "value";
      this.range = "ALL";
      this.data = {agents: {}, benchmark: null};
      this.plot = null;
      this.key = "";
      const button = (group, value, label) => {
        const b = el("button", {type: "button", class: "toggle", "data-group": group, "data-value": value}, label);
        b.addEventListener("click", () => { this[group] = value; this.draw(true); });
        return b;
      };
      this.controls = el("div", {class: "chart-controls"},
        el("span", {class: "group"}, button("mode", "value", "$"), button("mode", "return", "%")),
        el("span", {class: "group"}, ...RANGES.map(([r]) => button("range", r, r))));
      this.box = el("div", {class: "chart-box"});
      this.note = el("p", {class: "note chart-note"});
      this.section = el("section", {class: "market-chart", "data-market": market},
        el("h2", {}, `${market}: all agents`), this.controls, this.box, this.note);
      root.append(this.section);
      if (typeof ResizeObserver === "function") {
        new ResizeObserver(() => { if (this.plot) this.plot.setSize(this.size()); }).observe(this.box);
      }
    }

    size() {
      const width = Math.max(200, this.box.clientWidth || 600);
      return {width, height: width < 500 ? 220 : 300};
    }

    update(data) {
      this.data = data || {agents: {}, benchmark: null};
      this.draw(false);
    }

    /** The visible series: [label, [[ts, y]], dashed] in the current mode and range. */
    series() {
      const agents = Object.entries(this.data.agents || {});
      const last = Math.max(-Infinity, ...agents.map(([, p]) => (p.length ? p[p.length - 1][0] : -Infinity)));
      const span = RANGES.find(([r]) => r === this.range)[1];
      const from = Number.isFinite(span) && Number.isFinite(last) ? last - span : -Infinity;
      const out = [];
      const starts = [];
      for (const [agent, pts] of agents) {
        const vis = pts.filter((p) => p[0] >= from);
        if (pts.length) starts.push(pts[0][1]);
        const base = vis.length ? vis[0][1] : null;
        out.push([agent, this.mode === "return" ? vis.map(([t, v]) => [t, base > 0 ? v / base - 1 : null]) : vis, false]);
      }
      const bench = this.data.benchmark && this.data.benchmark.points;
      if (bench && bench.length) {
        const vis = bench.filter((p) => p[0] >= from);
        const b0 = vis.length ? 1 + vis[0][1] : 1;
        const initial = starts.length ? starts.sort((a, b) => a - b)[Math.floor(starts.length / 2)] : 1;
        // In $ mode the index is scaled to the agents' median starting value.
        out.push([BENCH, this.mode === "return" ? vis.map(([t, r]) => [t, (1 + r) / b0 - 1])
          : vis.map(([t, r]) => [t, initial * (1 + r)]), true]);
      }
      return out;
    }

    draw(force) {
      for (const b of this.controls.querySelectorAll("button")) {
        b.classList.toggle("on", this[b.dataset.group] === b.dataset.value);
      }
      const series = this.series();
      const data = align(series.map((s) => s[1]));
      const agents = series.filter((s) => !s[2]).length;
      this.section.dataset.series = String(series.length);
      this.section.dataset.agents = String(agents);
      this.note.textContent = data[0].length ? "" : "No marks yet: the chart starts with the first mark of a round.";
      const key = `${this.mode}|${series.map((s) => s[0]).join("\u0001")}`;
      if (this.plot && key === this.key && !force) {
        this.plot.setData(data);
        return;
      }
      if (this.plot) this.plot.destroy();
      this.key = key;
      const fmt = this.mode === "return" ? (x) => (finite(x) ? pct(x) : "-") : (x) => (finite(x) ? money(x) : "-");
      const opts = {
        ...this.size(),
        scales: {x: {time: true}},
        legend: {live: true},
        cursor: {points: {size: 6}},
        axes: [{}, {values: (u, ticks) => ticks.map(fmt), size: 70}],
        series: [{value: (u, ts) => (finite(ts) ? PA.time(ts) : "-")},
          ...series.map(([label, , dashed], i) => ({
            label, spanGaps: true, width: dashed ? 1.5 : 1.8,
            stroke: dashed ? "#555" : PALETTE[i % PALETTE.length],
            dash: dashed ? [6, 4] : undefined,
            value: (u, y, si, idx) => fmt(y !== null && y !== undefined ? y : held(u.data[si], idx)),
          }))],
      };
      this.plot = new uPlot(opts, data, this.box);
    }
  }

  const charts = new Map();

  /** Render /api/chart's answer into `root` (one chart per market, kept across updates). */
  function render(root, answer) {
    const markets = (answer && answer.markets) || {};
    for (const [market, data] of Object.entries(markets)) {
      if (!charts.has(market)) charts.set(market, new MarketChart(market, root));
      charts.get(market).update(data);
    }
  }

  return {render, align, charts};
})();
