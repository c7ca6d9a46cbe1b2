// The leaderboard's inference on the page (issue 27): each market's Model Confidence Set as a
// band above its table, and each ranked agent's rank stability in its rank cell's tooltip.
// The figures are the report's (/api/leaderboard, docs/scoring.md "Significance").
"use strict";

const PASIG = (() => {
  const share = (x) => (typeof x === "number" && isFinite(x) ? `${(100 * x).toFixed(1)}%` : "-");
  const pval = (x) => (typeof x !== "number" || !isFinite(x) ? "-" : x < 1e-4 ? "< 0.0001" : x.toFixed(3));

  // Return the band naming the market's Model Confidence Set, or null without one.
  function mcsBand(info, el) {
    const mcs = (info || {}).mcs || {};
    if (!Array.isArray(mcs.agents) || !mcs.agents.length) return null;
    const level = Math.round(100 * (mcs.level || 0.9));
    return el("p", {class: "mcs-band", "data-field": "mcs",
      title: "Model Confidence Set (Hansen, Lunde and Nason): the agents not distinguishable from the best; block bootstrap of the daily excess returns"},
    `${level}% Model Confidence Set (${mcs.days} days): ${mcs.agents.join(", ")}` +
    // a family so large that Holm's smallest adjusted p-value (m / (B + 1)) is 0.05 or more
    (info.holm_floor >= 0.05 ? `; ${info.comparisons} comparisons: the smallest Holm-adjusted` +
      ` p-value the draws allow is ${info.holm_floor.toPrecision(3)}, none can be significant` : ""));
  }

  // Return the rank stability of a row as one line for a tooltip ("" without one).
  function stabilityTitle(r) {
    const s = (r || {}).rank_stability;
    if (!s) return "";
    const vs = r.vs_next || {};
    const parts = [`#1 in ${share(s.top1)} of resamples, top 3 in ${share(s.top3)}`];
    if (s.p_to_best != null) parts.push(`p to the best ${pval(s.p_to_best)}`);
    if (r.in_mcs != null) parts.push(r.in_mcs ? "inside the Model Confidence Set" : "outside the Model Confidence Set");
    if (vs.p_value_holm != null) parts.push(`vs next: Holm-adjusted p ${pval(vs.p_value_holm)}`);
    return parts.join("; ");
  }

  return {mcsBand, stabilityTitle};
})();
