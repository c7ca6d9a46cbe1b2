#!/usr/bin/env python3
"""Write the paperarena Grafana dashboards (``grafana/dashboards/*.json``) with stable uids.

    python3 grafana/generate.py          # rewrite the JSON files
    python3 grafana/generate.py --check  # exit 1 if a file differs from what would be written

Edit the panels here, not in the JSON: every expression uses the variables ``$instance``,
``$market``, ``$agent`` or ``$source`` and Grafana's ``$__rate_interval`` / ``$__range``.

Why one module over 500 lines: one generator of the four dashboards, whose panels share the same
query builders and layout helpers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
I = 'instance=~"$instance"'  # noqa: E741 - short on purpose, used in every expression


#: Descriptions of the panels that do not set their own (by title); every panel needs one.
DESCRIPTIONS: dict[str, str] = {
    "Agents running": "Agents the daemon runs (all markets).",
    "Halted agents": "Agents halted by their drawdown limit in the selected markets.",
    "Firing alerts": "paperarena alerts firing in Prometheus now.",
    "Daemon alerts (range)": "Alerts the daemon raised over the dashboard's time range.",
    "Feeds live": "Share of the feeds that are live (1 = every feed).",
    "Decisions (range)": "Decision rounds of every agent over the dashboard's time range.",
    "Equity curves (mark-to-market)": "Portfolio value in USD, marked to market.",
    "Cumulative return": "Return since the start: value / initial cash - 1.",
    "Decisions by outcome": "Decisions per outcome (ok, hold, invalid, error, skipped...).",
    "Firing Prometheus alerts": "paperarena alerts firing in Prometheus, with their labels.",
    "Value": "Mark-to-market portfolio value in USD per market.",
    "Return": "Cumulative return since the start per market.",
    "Drawdown": "Current drawdown from the running peak (positive magnitude).",
    "Max drawdown": "Largest drawdown from a peak so far, over the daily marks.",
    "Drawdown limit": "The agent's own drawdown limit (its max_drawdown or its profile's).",
    "Halted": "1 when the agent is halted by its drawdown limit.",
    "Sharpe": "Annualised Sharpe ratio of the daily returns (empty until two exist).",
    "Sortino": "Annualised standard Sortino ratio: downside below the risk-free rate over "
               "all days.",
    "Calmar": "Annualised return over the maximum drawdown of the daily marks.",
    "Volatility (annualised)": "Standard deviation of the daily returns, annualised.",
    "Drawdown against limit": "Current drawdown; dashed: the agent's own limit.",
    "Cash share": "Share of the portfolio held in cash.",
    "LLM tokens / s": "Model tokens per second, prompt (in) and completion (out).",
    "LLM cost per day": "USD spent on model calls per day.",
    "Daily LLM budget used": "Share of the daily token / USD budget used; at 100% the agent "
                             "is paused until 00:00 UTC.",
    "Firing alerts of this agent": "Prometheus alerts firing for this agent.",
    "Daemon up": "1 when Prometheus scrapes the selected daemon.",
    "Event loop lag (max 1m)": "Largest event-loop lag over the last minute.",
    "Memory (RSS)": "Resident memory of the daemon process.",
    "Store backlog (events)": "Events waiting to be written to the store.",
    "Engine clock": "The engine's clock (wall clock live, recorded time in a replay).",
    "Version": "Version of the running daemon.",
    "Feed up (1 = live)": "1 while a feed is live.",
    "Market hours": "1 while a feed's or a market's session is open.",
    "Messages / s": "Messages received per second per feed.",
    "Data age (engine clock)": "Age of the newest data of each feed on the engine clock.",
    "Seconds since last frame (wall clock)": "Wall-clock time since each feed's last frame.",
    "Reconnects and decode errors": "Feed reconnects and undecodable frames per hour.",
    "Bus events / s": "Events published on the internal bus per second, by topic class.",
    "Bus dropped and conflated / s": "Bus events dropped or conflated by slow subscribers.",
    "Bus queue depth": "Events queued per bus subscriber.",
    "Event loop lag": "Event-loop lag: last heartbeat and the maximum over a minute.",
    "Decision round duration": "Wall time of a decision round, p50 and p95, per market.",
    "Store writes / s": "Events written to the store per second.",
    "CPU": "CPU cores used by the daemon process.",
    "HTTP requests / s": "HTTP requests served per second by handler and status.",
    "Alert notifications": "Alert deliveries per notifier and result, per hour.",
    "Cost today (UTC day so far, 1d window)": "USD spent on model calls over the last day.",
    "Cost since start": "USD spent on model calls since the daemon started.",
    "Tokens (1d)": "Model tokens over the last day.",
    "Calls (1d)": "Model calls over the last day.",
    "Tokens / s": "Model tokens per second per agent and direction.",
    "Cost per day": "USD spent on model calls per agent and day.",
    "Cost per decision (1d)": "USD spent per asked decision over the last day.",
    "Calls by result": "Model calls per agent by result (ok, error).",
    "Paused, failed and invalid decisions": "Decisions paused by the budget, failed or "
                                            "invalid, per hour.",
}


class Board:
    """Accumulate panels laid out on Grafana's 24-column grid."""

    def __init__(self) -> None:
        """Start empty at the top left."""
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_h = 0

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        """Place ``panel`` (w x h) after the previous one, wrapping at 24 columns."""
        if self.x + w > 24:
            self.x = 0
            self.y += self.row_h
            self.row_h = 0
        if panel.get("type") != "row" and not panel.get("description"):
            panel["description"] = DESCRIPTIONS[panel["title"]]
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def row(self, title: str) -> None:
        """Start a new row with a title."""
        if self.x:
            self.x = 0
            self.y += self.row_h
            self.row_h = 0
        self.add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.x = 0
        self.y += 1
        self.row_h = 0


def target(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False,
           table: bool = False) -> dict[str, Any]:
    """Return a Prometheus query target."""
    t: dict[str, Any] = {"datasource": DS, "refId": ref, "expr": expr,
                         "legendFormat": legend or "__auto", "range": not instant,
                         "instant": instant}
    if table:
        t["format"] = "table"
    return t


def timeseries(title: str, targets: list[dict[str, Any]], unit: str = "short", *,
               description: str = "", overrides: list[dict[str, Any]] | None = None,
               stack: bool = False, bars: bool = False, minimum: float | None = None
               ) -> dict[str, Any]:
    """Return a time series panel."""
    custom: dict[str, Any] = {"drawStyle": "bars" if bars else "line", "lineWidth": 1,
                              "fillOpacity": 10 if not bars else 80, "showPoints": "never",
                              "spanNulls": True}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    defaults: dict[str, Any] = {"unit": unit, "custom": custom}
    if minimum is not None:
        defaults["min"] = minimum
    return {"type": "timeseries", "title": title, "description": description, "datasource": DS,
            "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def stat(title: str, expr: str, unit: str = "short", *, description: str = "",
         legend: str = "", thresholds: list[tuple[float | None, str]] | None = None,
         decimals: int | None = None) -> dict[str, Any]:
    """Return a stat panel."""
    steps = [{"color": c, "value": v} for v, c in (thresholds or [(None, "green")])]
    defaults: dict[str, Any] = {"unit": unit,
                                "thresholds": {"mode": "absolute", "steps": steps}}
    if decimals is not None:
        defaults["decimals"] = decimals
    return {"type": "stat", "title": title, "description": description, "datasource": DS,
            "targets": [target(expr, legend, instant=True)],
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                          "values": False},
                        "colorMode": "value", "graphMode": "none", "textMode": "auto"}}


def table(title: str, targets: list[dict[str, Any]], *, description: str = "",
          rename: dict[str, str] | None = None, units: dict[str, str] | None = None,
          exclude: tuple[str, ...] = ("Time", "instance", "job", "__name__"),
          sort_by: str = "") -> dict[str, Any]:
    """Return a table panel merging instant queries by their labels (sorted by ``sort_by``)."""
    overrides = [{"matcher": {"id": "byName", "options": col},
                  "properties": [{"id": "unit", "value": unit}]}
                 for col, unit in (units or {}).items()]
    return {"type": "table", "title": title, "description": description, "datasource": DS,
            "targets": targets,
            "fieldConfig": {"defaults": {"custom": {"align": "auto"}}, "overrides": overrides},
            "options": {"showHeader": True, "cellHeight": "sm",
                        **({"sortBy": [{"displayName": sort_by, "desc": True}]}
                           if sort_by else {})},
            "transformations": [
                {"id": "merge", "options": {}},
                {"id": "organize", "options": {
                    "excludeByName": dict.fromkeys(exclude, True),
                    "renameByName": rename or {}}},
            ]}


def gauge(title: str, expr: str, legend: str, unit: str = "percentunit", *,
          description: str = "", maximum: float = 1.0) -> dict[str, Any]:
    """Return a bar gauge panel."""
    return {"type": "bargauge", "title": title, "description": description, "datasource": DS,
            "targets": [target(expr, legend, instant=True)],
            "fieldConfig": {"defaults": {
                "unit": unit, "min": 0, "max": maximum,
                "thresholds": {"mode": "absolute", "steps": [
                    {"color": "green", "value": None}, {"color": "orange", "value": 0.8 * maximum},
                    {"color": "red", "value": maximum}]}}, "overrides": []},
            "options": {"orientation": "horizontal", "displayMode": "gradient",
                        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                          "values": False}}}


def dashed(regex: str) -> dict[str, Any]:
    """Return an override drawing series whose name matches ``regex`` dashed."""
    return {"matcher": {"id": "byRegexp", "options": regex},
            "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                           {"id": "custom.fillOpacity", "value": 0}]}


def var_datasource() -> dict[str, Any]:
    """Return the datasource template variable (defaults to the provisioned one)."""
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {"text": "paperarena Prometheus",
                                               "value": "paperarena-prometheus"},
            "hide": 0, "refresh": 1, "regex": "", "skipUrlSync": False}


def var_query(name: str, query: str, *, label: str = "", multi: bool = True,
              include_all: bool = True, regex: str = "") -> dict[str, Any]:
    """Return a query template variable over label values (``regex`` extracts the value)."""
    v: dict[str, Any] = {"name": name, "label": label or name, "type": "query",
                         "datasource": DS, "definition": query,
                         "query": {"query": query, "refId": f"{name}-var"},
                         "refresh": 2, "sort": 1, "multi": multi, "includeAll": include_all,
                         "hide": 0, "regex": regex, "skipUrlSync": False,
                         "current": {}, "options": []}
    if include_all:
        v["allValue"] = ".*"
        v["current"] = {"text": "All", "value": "$__all"}
    return v


def dashboard(uid: str, title: str, description: str, board: Board,
              variables: list[dict[str, Any]], *, time_from: str = "now-7d") -> dict[str, Any]:
    """Return a complete dashboard."""
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["paperarena"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": time_from, "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "paperarena", "type": "dashboards", "tags": ["paperarena"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}],
        "templating": {"list": [var_datasource(),
                                var_query("instance", "label_values(paperarena_build_info, "
                                          "instance)", label="Daemon"), *variables]},
        "panels": board.panels,
    }


# --------------------------------------------------------------------------------- dashboards

#: Leaderboard figures (paperarena_leaderboard_figure) on the overview table: (ref, figure).
LEADERBOARD_FIGURES = (("I", "rank"), ("J", "composite_score"), ("K", "capitalbench_score"),
                       ("L", "s_corr"))
LEADERBOARD_LABELS = (("I", "rank"), ("J", "composite"), ("K", "CapitalBench"),
                      ("L", "s_corr"))


def overview() -> dict[str, Any]:
    """Return the overview: leaderboard, equity curves, drawdown against limits, alerts."""
    b = Board()
    m = f'market=~"$market",{I}'
    b.add(stat("Agents running", f"sum(paperarena_agents{{{I}}})"), 4, 4)
    b.add(stat("Halted agents", f'sum(paperarena_agent_status{{status="halted",{m}}})',
               thresholds=[(None, "green"), (1, "red")]), 4, 4)
    b.add(stat("Firing alerts", 'count(ALERTS{alertstate="firing",alertname=~"Paperarena.*"})'
               " or vector(0)", thresholds=[(None, "green"), (1, "red")]), 4, 4)
    b.add(stat("Daemon alerts (range)", f"sum(increase(paperarena_alerts_total{{{I}}}[$__range]))",
               decimals=0), 4, 4)
    b.add(stat("Feeds live", f"sum(paperarena_feed_up{{{I}}}) / count(paperarena_feed_up{{{I}}})",
               "percentunit", thresholds=[(None, "red"), (0.99, "green")]), 4, 4)
    b.add(stat("Decisions (range)", f"sum(increase(paperarena_decisions_total{{{m}}}[$__range]))",
               decimals=0), 4, 4)
    b.row("Leaderboard")
    by = "max by (agent, market)"
    b.add(table("Leaderboard", [
        target(f"{by} (paperarena_portfolio_return_ratio{{{m}}})", ref="A", instant=True,
               table=True),
        target(f"{by} (paperarena_portfolio_value_usd{{{m}}})", ref="B", instant=True,
               table=True),
        target(f"{by} (paperarena_portfolio_sharpe{{{m}}})", ref="C", instant=True, table=True),
        target(f"{by} (paperarena_portfolio_sortino{{{m}}})", ref="D", instant=True, table=True),
        target(f"{by} (paperarena_portfolio_max_drawdown_ratio{{{m}}})", ref="E", instant=True,
               table=True),
        target(f"{by} (paperarena_portfolio_drawdown_ratio{{{m}}})", ref="F", instant=True,
               table=True),
        target(f"{by} (paperarena_portfolio_drawdown_limit_ratio{{{m}}})", ref="G",
               instant=True, table=True),
        target(f'{by} (paperarena_agent_status{{status="halted",{m}}})', ref="H", instant=True,
               table=True),
        *(target(f'{by} (paperarena_leaderboard_figure{{figure="{fig}",{m}}})', ref=ref,
                 instant=True, table=True) for ref, fig in LEADERBOARD_FIGURES),
    ], description="Live figures per agent and market, sorted by return; Sharpe and Sortino "
                   "use daily marks (empty until two daily returns exist). rank: by return "
                   "among the ranked agents; composite: StockBench Eq. 4; CapitalBench: 100 * "
                   "return / best asset's return; s_corr: PortBench diversification (see "
                   "docs/scoring.md).",
        rename={"Value #A": "return", "Value #B": "value (USD)", "Value #C": "Sharpe",
                "Value #D": "Sortino", "Value #E": "max drawdown", "Value #F": "drawdown",
                "Value #G": "limit", "Value #H": "halted",
                **{f"Value #{ref}": label for ref, label in LEADERBOARD_LABELS}},
        units={"return": "percentunit", "value (USD)": "currencyUSD",
               "max drawdown": "percentunit", "drawdown": "percentunit",
               "limit": "percentunit"},
        sort_by="return"), 24, 9)
    b.row("Performance")
    b.add(timeseries("Equity curves (mark-to-market)", [
        target(f"{by} (paperarena_portfolio_value_usd{{{m}}})", "{{agent}} · {{market}}")],
        "currencyUSD"), 12, 9)
    b.add(timeseries("Cumulative return", [
        target(f"{by} (paperarena_portfolio_return_ratio{{{m}}})", "{{agent}} · {{market}}")],
        "percentunit"), 12, 9)
    b.add(timeseries("Drawdown against limits", [
        target(f"{by} (paperarena_portfolio_drawdown_ratio{{{m}}})", "{{agent}} · {{market}}",
               "A"),
        target(f"{by} (paperarena_portfolio_drawdown_limit_ratio{{{m}}})",
               "limit {{agent}} · {{market}}", "B"),
    ], "percentunit", overrides=[dashed("^limit .*")], minimum=0,
        description="Current drawdown from the running peak; dashed: each agent's limit."),
        12, 9)
    b.add(timeseries("Decisions by outcome", [
        target(f"sum by (outcome) (increase(paperarena_decisions_total{{{m}}}"
               "[$__rate_interval]))", "{{outcome}}")], "short", bars=True, stack=True), 12, 9)
    b.row("Alerts")
    b.add(timeseries("Daemon alerts by kind", [
        target(f"sum by (kind) (increase(paperarena_alerts_total{{{I}}}[$__rate_interval]))",
               "{{kind}}")], "short", bars=True, stack=True,
        description="Alerts raised inside the daemon (drawdown breaches, stale feeds...)."),
        12, 8)
    b.add(table("Firing Prometheus alerts", [
        target('ALERTS{alertstate="firing",alertname=~"Paperarena.*"}', instant=True,
               table=True)],
        exclude=("Time", "__name__", "Value", "alertstate", "job")), 12, 8)
    return dashboard("paperarena-overview", "paperarena · Overview",
                     "Leaderboard, equity curves, drawdown against limits and alerts.", b,
                     [var_query("market", f"label_values(paperarena_portfolio_value_usd{{{I}}}, "
                                "market)", label="Market")])


def agent() -> dict[str, Any]:
    """Return the agent drill-down (``$agent``)."""
    b = Board()
    a = f'agent="$agent",market=~"$market",{I}'
    by = "max by (market)"
    b.add(stat("Value", f"{by} (paperarena_portfolio_value_usd{{{a}}})", "currencyUSD",
               legend="{{market}}"), 4, 4)
    b.add(stat("Return", f"{by} (paperarena_portfolio_return_ratio{{{a}}})", "percentunit",
               legend="{{market}}"), 4, 4)
    b.add(stat("Drawdown", f"{by} (paperarena_portfolio_drawdown_ratio{{{a}}})", "percentunit",
               legend="{{market}}", thresholds=[(None, "text")]), 4, 4)
    b.add(stat("Drawdown used of its limit",
               f"{by} (paperarena_portfolio_drawdown_ratio{{{a}}}) / "
               f"{by} (paperarena_portfolio_drawdown_limit_ratio{{{a}}})", "percentunit",
               legend="{{market}}", thresholds=[(None, "green"), (0.5, "orange"), (1, "red")],
               description="Current drawdown as a share of the agent's own limit: orange from "
                           "half of it, red at the limit (the agent is halted there)."), 4, 4)
    b.add(stat("Max drawdown", f"{by} (paperarena_portfolio_max_drawdown_ratio{{{a}}})",
               "percentunit", legend="{{market}}"), 4, 4)
    b.add(stat("Drawdown limit", f"{by} (paperarena_portfolio_drawdown_limit_ratio{{{a}}})",
               "percentunit", legend="{{market}}"), 4, 4)
    b.add(stat("Halted", f'{by} (paperarena_agent_status{{status="halted",{a}}})',
               legend="{{market}}", thresholds=[(None, "green"), (1, "red")]), 4, 4)
    b.add(stat("Sharpe", f"{by} (paperarena_portfolio_sharpe{{{a}}})", legend="{{market}}",
               decimals=2), 6, 4)
    b.add(stat("Sortino", f"{by} (paperarena_portfolio_sortino{{{a}}})", legend="{{market}}",
               decimals=2), 6, 4)
    b.add(stat("Calmar", f"{by} (paperarena_portfolio_calmar{{{a}}})", legend="{{market}}",
               decimals=2), 6, 4)
    b.add(stat("Volatility (annualised)",
               f"{by} (paperarena_portfolio_volatility_ratio{{{a}}})", "percentunit",
               legend="{{market}}"), 6, 4)
    b.row("Portfolio")
    b.add(timeseries("Value", [target(f"{by} (paperarena_portfolio_value_usd{{{a}}})",
                                      "{{market}}")], "currencyUSD"), 12, 8)
    b.add(timeseries("Drawdown against limit", [
        target(f"{by} (paperarena_portfolio_drawdown_ratio{{{a}}})", "{{market}}", "A"),
        target(f"{by} (paperarena_portfolio_drawdown_limit_ratio{{{a}}})", "limit {{market}}",
               "B"),
    ], "percentunit", overrides=[dashed("^limit .*")], minimum=0), 12, 8)
    b.add(timeseries("Cash share", [target(f"{by} (paperarena_portfolio_cash_ratio{{{a}}})",
                                           "{{market}}")], "percentunit", minimum=0), 12, 8)
    b.add(timeseries("Decisions by outcome", [
        target(f"sum by (outcome) (increase(paperarena_decisions_total{{{a}}}"
               "[$__rate_interval]))", "{{outcome}}")], bars=True, stack=True), 12, 8)
    b.row("Model usage and alerts")
    u = f'agent="$agent",{I}'
    b.add(timeseries("LLM tokens / s", [
        target(f"sum by (direction) (rate(paperarena_llm_tokens_total{{{u}}}"
               "[$__rate_interval]))", "{{direction}}")], "short"), 8, 8)
    b.add(timeseries("LLM cost per day", [
        target(f"sum(increase(paperarena_llm_cost_usd_total{{{u}}}[1d]))", "USD / day")],
        "currencyUSD"), 8, 8)
    b.add(gauge("Daily LLM budget used", f"max(paperarena_llm_budget_used_ratio{{{u}}})",
                "$agent"), 8, 8)
    b.add(table("Firing alerts of this agent", [
        target('ALERTS{alertstate="firing",agent="$agent"}', instant=True, table=True)],
        exclude=("Time", "__name__", "Value", "alertstate", "job", "agent")), 24, 6)
    return dashboard("paperarena-agent", "paperarena · Agent", "One agent in depth.", b, [
        var_query("agent", f"label_values(paperarena_portfolio_value_usd{{{I}}}, agent)",
                  label="Agent", multi=False, include_all=False),
        var_query("market", 'label_values(paperarena_portfolio_value_usd{agent="$agent"}, '
                  "market)", label="Market"),
    ])


def system() -> dict[str, Any]:
    """Return feeds and system health."""
    b = Board()
    s = f'source=~"$source",{I}'
    b.add(stat("Daemon up", f'min(up{{{I},job="paperarena"}})', thresholds=[(None, "red"),
                                                                      (1, "green")]), 4, 4)
    b.add(stat("Event loop lag (max 1m)", f"max(paperarena_event_loop_lag_max_seconds{{{I}}})",
               "s", thresholds=[(None, "green"), (0.5, "orange"), (1, "red")]), 4, 4)
    b.add(stat("Memory (RSS)", f'max(process_resident_memory_bytes{{{I},job="paperarena"}})',
               "bytes"), 4, 4)
    b.add(stat("Store backlog (events)", f"sum(paperarena_store_pending_events{{{I}}})"), 4, 4)
    b.add(stat("Engine clock", f"max(paperarena_clock_timestamp_seconds{{{I}}}) * 1000",
               "dateTimeAsIso"), 4, 4)
    b.add(table("Version", [target(f"paperarena_build_info{{{I}}}", instant=True, table=True)],
                exclude=("Time", "__name__", "Value", "job")), 4, 4)
    b.row("Feeds")
    b.add(timeseries("Feed up (1 = live)", [target(f"max by (source) (paperarena_feed_up{{{s}}})",
                                                   "{{source}}")], minimum=0), 12, 8)
    b.add(timeseries("Market hours", [
        target(f"max by (source) (paperarena_feed_market_open{{{s}}})", "{{source}}", "A"),
        target(f"max by (market) (paperarena_market_open{{{I}}})", "market {{market}}", "B"),
    ], minimum=0), 12, 8)
    b.add(timeseries("Messages / s", [
        target(f"sum by (source) (rate(paperarena_feed_messages_total{{{s}}}"
               "[$__rate_interval]))", "{{source}}")], "short"), 12, 8)
    b.add(timeseries("Data age (engine clock)", [
        target(f"max by (source) (paperarena_feed_data_age_seconds{{{s}}})", "{{source}}")],
        "s"), 12, 8)
    b.add(timeseries("Seconds since last frame (wall clock)", [
        target(f"time() - max by (source) (paperarena_feed_last_message_timestamp_seconds{{{s}}})",
               "{{source}}")], "s"), 12, 8)
    b.add(timeseries("Reconnects and decode errors", [
        target(f"sum by (source) (increase(paperarena_feed_reconnects_total{{{s}}}[1h]))",
               "reconnects {{source}}", "A"),
        target(f"sum by (source) (increase(paperarena_feed_decode_errors_total{{{s}}}[1h]))",
               "decode errors {{source}}", "B"),
    ], "short"), 12, 8)
    b.row("Bus, store, decisions, process")
    b.add(timeseries("Bus events / s", [
        target(f"sum by (topic_class) (rate(paperarena_bus_published_events_total{{{I}}}"
               "[$__rate_interval]))", "{{topic_class}}")], "short"), 8, 8)
    b.add(timeseries("Bus dropped and conflated / s", [
        target(f"sum by (topic_class) (rate(paperarena_bus_dropped_events_total{{{I}}}"
               "[$__rate_interval]))", "dropped {{topic_class}}", "A"),
        target(f"sum by (topic_class) (rate(paperarena_bus_conflated_events_total{{{I}}}"
               "[$__rate_interval]))", "conflated {{topic_class}}", "B"),
    ], "short"), 8, 8)
    b.add(timeseries("Bus queue depth", [
        target(f"max by (subscriber) (paperarena_bus_queue_depth{{{I}}})", "{{subscriber}}")],
        "short"), 8, 8)
    b.add(timeseries("Event loop lag", [
        target(f"max(paperarena_event_loop_lag_seconds{{{I}}})", "last", "A"),
        target(f"max(paperarena_event_loop_lag_max_seconds{{{I}}})", "max over 1m", "B"),
    ], "s"), 8, 8)
    b.add(timeseries("Decision round duration", [
        target("histogram_quantile(0.95, sum by (le, market) "
               f"(rate(paperarena_decision_duration_seconds_bucket{{{I}}}[$__rate_interval])))",
               "p95 {{market}}", "A"),
        target("histogram_quantile(0.5, sum by (le, market) "
               f"(rate(paperarena_decision_duration_seconds_bucket{{{I}}}[$__rate_interval])))",
               "p50 {{market}}", "B"),
    ], "s"), 8, 8)
    b.add(timeseries("Store writes / s", [
        target(f"sum(rate(paperarena_store_events_written_total{{{I}}}[$__rate_interval]))",
               "events written")], "short"), 8, 8)
    b.add(timeseries("CPU", [
        target(f'sum(rate(process_cpu_seconds_total{{{I},job="paperarena"}}[$__rate_interval]))',
               "cores")], "short"), 8, 8)
    b.add(timeseries("HTTP requests / s", [
        target(f"sum by (handler, code) (rate(paperarena_http_requests_total{{{I}}}"
               "[$__rate_interval]))", "{{handler}} {{code}}")], "reqps"), 8, 8)
    b.add(timeseries("Alert notifications", [
        target(f"sum by (notifier, result) (increase(paperarena_alert_notifications_total{{{I}}}"
               "[1h]))", "{{notifier}} {{result}}")], "short"), 8, 8)
    return dashboard("paperarena-system", "paperarena · Feeds and system health",
                     "Feeds, bus, store, event loop, decisions and the process.", b, [
                         var_query("source", f"label_values(paperarena_feed_up{{{I}}}, source)",
                                   label="Source")], time_from="now-6h")


def llm() -> dict[str, Any]:
    """Return LLM usage and cost."""
    b = Board()
    a = f'agent=~"$agent",{I}'
    b.add(stat("Cost today (UTC day so far, 1d window)",
               f"sum(increase(paperarena_llm_cost_usd_total{{{a}}}[1d]))", "currencyUSD"), 6, 4)
    b.add(stat("Cost since start", f"sum(paperarena_llm_cost_usd_total{{{a}}})", "currencyUSD"),
          6, 4)
    b.add(stat("Tokens (1d)", f"sum(increase(paperarena_llm_tokens_total{{{a}}}[1d]))",
               decimals=0), 6, 4)
    b.add(stat("Calls (1d)", f"sum(increase(paperarena_llm_calls_total{{{a}}}[1d]))",
               decimals=0), 6, 4)
    b.add(gauge("Daily budget used", f"max by (agent) (paperarena_llm_budget_used_ratio{{{a}}})",
                "{{agent}}", description="Max of the token and USD budgets; at 100% the "
                                         "agent is paused until 00:00 UTC."), 12, 8)
    b.add(timeseries("Tokens / s", [
        target(f"sum by (agent, direction) (rate(paperarena_llm_tokens_total{{{a}}}"
               "[$__rate_interval]))", "{{agent}} {{direction}}")], "short"), 12, 8)
    b.add(timeseries("Cost per day", [
        target(f"sum by (agent) (increase(paperarena_llm_cost_usd_total{{{a}}}[1d]))",
               "{{agent}}")], "currencyUSD"), 12, 8)
    b.add(timeseries("Cost per decision (1d)", [
        target(f"sum by (agent) (increase(paperarena_llm_cost_usd_total{{{a}}}[1d])) / "
               f"sum by (agent) (increase(paperarena_decisions_total{{{a},"
               'outcome=~"ok|hold|invalid|error|rejected"}[1d]))', "{{agent}}")],
        "currencyUSD"), 12, 8)
    b.add(timeseries("Calls by result", [
        target(f"sum by (agent, result) (increase(paperarena_llm_calls_total{{{a}}}"
               "[$__rate_interval]))", "{{agent}} {{result}}")], bars=True, stack=True), 12, 8)
    b.add(timeseries("Paused, failed and invalid decisions", [
        target(f"sum by (agent, outcome) (increase(paperarena_decisions_total{{{a},"
               'outcome=~"paused|error|invalid"}[1h]))', "{{agent}} {{outcome}}")], "short"),
        12, 8)
    return dashboard("paperarena-llm", "paperarena · LLM usage and cost",
                     "Model tokens, cost and daily budgets per agent.", b, [
                         var_query("agent", "query_result(sum by (agent) "
                                   f"(paperarena_llm_calls_total{{{I}}}) > 0)", label="Agent",
                                   regex='/agent="([^"]+)"/')])


DASHBOARDS = {
    "paperarena-overview.json": overview,
    "paperarena-agent.json": agent,
    "paperarena-system.json": system,
    "paperarena-llm.json": llm,
}


def render(fn: Any) -> str:
    """Return the JSON text of one dashboard."""
    return json.dumps(fn(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    """Write (or ``--check``) every dashboard."""
    check = "--check" in argv
    OUT.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, fn in DASHBOARDS.items():
        path = OUT / name
        text = render(fn)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        sys.stderr.write(f"out of date: {', '.join(stale)} (run python3 grafana/generate.py)\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
