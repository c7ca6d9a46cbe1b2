"""PortBench's correlation-aware diversification (pure numpy).

Implements the two-layer correlation score of PortBench (Appendix C.1, Eqs. 8-11):
``s_intra``, ``s_inter`` and ``s_corr`` of a portfolio's class weights, the class correlations
of a universe estimated from a returns panel (pairwise-complete Pearson), and the score of held
weights under them. Every convention, including those PortBench leaves open (a single held
class, all cash, a one-member class), is stated in the docstrings and in ``docs/scoring.md``.
Undefined correlations give NaN rather than raising; malformed input (mismatched shapes,
missing keys) raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from scoring.stats.metrics import STD_ZERO_RTOL

__all__ = [
    "ClassCorrelations",
    "class_correlations",
    "corr_matrix",
    "diversification",
    "diversification_from_returns",
    "diversification_rows",
    "s_corr",
    "s_inter",
    "s_intra",
    "signed_question_exposures",
    "signed_question_rows",
]

#: ``s_inter`` of a portfolio with fewer than two weighted classes: no hedging credit.
SINGLE_CLASS_S_INTER = 0.0

_NAN = float("nan")


def s_intra(class_weights: Mapping[str, float], rho_intra: Mapping[str, float]) -> float:
    """Return ``clip(1 - sum_c w_c * max(rho_intra_c, 0), 0, 1)``.

    Classes with zero weight are ignored; a weighted class missing from ``rho_intra`` raises
    ``ValueError``.
    """
    total = 0.0
    for c, w in class_weights.items():
        if float(w) == 0.0:
            continue
        if c not in rho_intra:
            raise ValueError(f"rho_intra missing for class {c!r}")
        total += float(w) * max(float(rho_intra[c]), 0.0)
    return float(np.clip(1.0 - total, 0.0, 1.0))


def _pair_rho(pairs: Mapping[tuple[str, str], float], c: str, d: str) -> float:
    """Look up ``rho(c, d)`` under either key order."""
    if (c, d) in pairs:
        return float(pairs[(c, d)])
    if (d, c) in pairs:
        return float(pairs[(d, c)])
    raise ValueError(f"rho_cross missing for classes ({c!r}, {d!r})")


def s_inter(
    class_weights: Mapping[str, float], rho_cross_pairs: Mapping[tuple[str, str], float]
) -> float:
    """Return ``clip((1 - rho_cross) / 2, 0, 1)``.

    ``rho_cross = sum_{c != d} w_c w_d rho(c, d) / sum_{c != d} w_c w_d`` over ordered pairs of
    weighted classes (``rho`` is symmetric, either key order is accepted). Single-class
    convention (PortBench leaves ``0 / 0`` open): with fewer than two weighted classes there is
    no other class to hedge with, so the hedging credit is ``s_inter = 0``, the value of fully
    correlated classes.
    """
    held = [(c, float(w)) for c, w in class_weights.items() if float(w) != 0.0]
    num = 0.0
    den = 0.0
    for i, (c, wc) in enumerate(held):
        for d, wd in held[i + 1 :]:
            ww = 2.0 * wc * wd  # both orders (c, d) and (d, c)
            num += ww * _pair_rho(rho_cross_pairs, c, d)
            den += ww
    if den == 0.0:
        return SINGLE_CLASS_S_INTER
    rho_cross = num / den
    return float(np.clip((1.0 - rho_cross) / 2.0, 0.0, 1.0))


def s_corr(
    class_weights: Mapping[str, float],
    rho_intra: Mapping[str, float],
    rho_cross_pairs: Mapping[tuple[str, str], float],
) -> float:
    """Return ``0.5 * s_intra + 0.5 * s_inter``."""
    return 0.5 * s_intra(class_weights, rho_intra) + 0.5 * s_inter(class_weights, rho_cross_pairs)


def corr_matrix(x: np.ndarray) -> np.ndarray:
    """Return the Pearson correlation matrix; pairs involving a zero-variance column give 0.

    The diagonal is 1 for non-constant columns and 0 for constant ones (same rule).
    """
    xc = x - x.mean(axis=0)
    ss = np.einsum("ta,ta->a", xc, xc)
    std = np.sqrt(ss / max(x.shape[0] - 1, 1))
    live = std > STD_ZERO_RTOL * np.maximum(1.0, np.abs(x.mean(axis=0)))
    cov = xc.T @ xc
    norm = np.sqrt(np.outer(ss, ss))
    c = np.zeros_like(cov)
    mask = np.outer(live, live)
    c[mask] = cov[mask] / norm[mask]
    return np.clip(c, -1.0, 1.0)


def _pairwise_corr(x: np.ndarray) -> np.ndarray:
    """Return Pearson correlations of every column pair over their pairwise-complete rows.

    A pair uses the rows where both columns are finite; fewer than two such rows give NaN. A
    column that is constant over those rows (e.g. CASH) correlates 0 with everything, itself
    included (:func:`corr_matrix`).
    """
    fin = np.isfinite(x)
    if fin.all():
        return corr_matrix(x) if x.shape[0] >= 2 else np.full((x.shape[1],) * 2, np.nan)
    a = x.shape[1]
    out = np.full((a, a), np.nan)
    for i in range(a):
        for j in range(i, a):
            rows = fin[:, i] & fin[:, j]
            if int(rows.sum()) < 2:
                continue
            c = corr_matrix(x[rows][:, [i, j]])
            out[i, j] = out[j, i] = c[0, 1] if i != j else c[0, 0]
    return out


def _nanmean(values: np.ndarray) -> float:
    """Return the mean of the finite values; NaN when there is none."""
    v = values[np.isfinite(values)]
    return float(np.mean(v)) if v.size else _NAN


@dataclass(frozen=True)
class ClassCorrelations:
    """Hold the class correlations of a universe (PortBench: over the whole class)."""

    classes: dict[str, str]
    """Asset -> class."""
    intra: dict[str, float]
    """Class -> mean off-diagonal correlation among all its members (see below)."""
    cross: dict[tuple[str, str], float]
    """(class, class) in sorted order -> mean correlation over all cross member pairs."""
    riskless: frozenset[str]
    """Assets whose return series is constant (CASH): nothing at risk in them."""


def class_correlations(
    returns: ArrayLike, assets: Sequence[str], asset_classes: Mapping[str, str]
) -> ClassCorrelations:
    """Return PortBench's class correlations from a ``T x A`` returns panel (columns = ``assets``).

    As in PortBench (Appendix C.1), ``rho_intra_c`` is the mean off-diagonal Pearson
    correlation over **all** members of class ``c`` in the universe, held or not, and
    ``rho(c, d)`` the mean over all member pairs across ``c`` and ``d``. Correlations use
    pairwise-complete rows (PortBench's estimation); a pair with fewer than two common rows is
    left out of the means (a mean with no pair is NaN). A constant series (CASH) correlates 0
    with everything. A class with a single member has no off-diagonal pair: its
    ``rho_intra`` is that member's self-correlation, 1 for a risky asset (holding one asset
    is the most concentrated holding) and 0 for a constant one. Every asset must have a
    class (else ``ValueError``).
    """
    r = np.asarray(returns, dtype=float)
    if r.ndim != 2 or r.shape[1] != len(assets):
        raise ValueError(f"returns must be T x {len(assets)}, got shape {r.shape}")
    missing = [a for a in assets if a not in asset_classes]
    if missing:
        raise ValueError(f"asset {missing[0]!r} missing from asset_classes")
    corr = _pairwise_corr(r)
    members: dict[str, list[int]] = {}
    for j, a in enumerate(assets):
        members.setdefault(asset_classes[a], []).append(j)
    intra: dict[str, float] = {}
    for c, js in members.items():
        if len(js) == 1:
            intra[c] = float(corr[js[0], js[0]])
        else:
            block = corr[np.ix_(js, js)]
            intra[c] = _nanmean(block[~np.eye(len(js), dtype=bool)])
    cross: dict[tuple[str, str], float] = {}
    names = sorted(members)
    for i, c in enumerate(names):
        for d in names[i + 1 :]:
            cross[(c, d)] = _nanmean(corr[np.ix_(members[c], members[d])].reshape(-1))
    diag = np.diag(corr)
    riskless = frozenset(a for j, a in enumerate(assets) if diag[j] == 0.0)
    return ClassCorrelations({a: asset_classes[a] for a in assets}, intra, cross, riskless)


def diversification(
    weights: Mapping[str, float], corr: ClassCorrelations
) -> dict[str, float]:
    """Return ``{"s_intra", "s_inter", "s_corr"}`` of ``weights`` under class correlations.

    Only held assets (weight > 0) enter; ``w_c`` is the sum of the held weights of class ``c``
    (taken as given, not renormalised). With fewer than two held classes ``s_inter`` is 0 (no
    other class to hedge with, see :func:`s_inter`). All NaN when nothing is held, when every
    held asset is riskless (all cash: nothing at risk, nothing to diversify) or when a held
    class's correlation is undefined. A held asset outside the universe raises ``ValueError``.
    """
    nan_result = {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}
    class_weights: dict[str, float] = {}
    at_risk = False
    for a, w in weights.items():
        if float(w) <= 0.0:
            continue
        if a not in corr.classes:
            raise ValueError(f"weighted asset {a!r} missing from assets")
        c = corr.classes[a]
        class_weights[c] = class_weights.get(c, 0.0) + float(w)
        at_risk = at_risk or a not in corr.riskless
    if not class_weights or not at_risk:
        return nan_result
    held = sorted(class_weights)
    pairs = {(c, d): corr.cross.get((c, d), _NAN)
             for i, c in enumerate(held) for d in held[i + 1 :]}
    rhos = [corr.intra.get(c, _NAN) for c in held] + list(pairs.values())
    if not all(math.isfinite(x) for x in rhos):
        return nan_result
    si = s_intra(class_weights, corr.intra)
    se = s_inter(class_weights, pairs)
    return {"s_intra": si, "s_inter": se, "s_corr": 0.5 * si + 0.5 * se}


def diversification_from_returns(
    weights: Mapping[str, float],
    asset_classes: Mapping[str, str],
    returns: ArrayLike,
    assets: Sequence[str],
) -> dict[str, float]:
    """Return ``{"s_intra", "s_inter", "s_corr"}`` of ``weights`` from a ``T x A`` returns panel.

    :func:`class_correlations` over the whole universe ``assets`` (the columns of
    ``returns``), then :func:`diversification`. Conventions there: whole-class correlations,
    a one-member class has ``rho_intra`` 1 (0 if riskless), a single held class gets
    ``s_inter = 0``, all cash is NaN.
    """
    return diversification(weights, class_correlations(returns, assets, asset_classes))


def signed_question_exposures(weights: Mapping[str, float],
                              questions: Mapping[str, Sequence[str]],
                              corr: ClassCorrelations) -> dict[str, float]:
    """Return ``{"s_intra", "s_inter", "s_corr"}`` of a Polymarket book, one exposure a question.

    A question's YES and NO tokens are mirror images, so they are one signed exposure:
    ``e_q = w_YES - w_NO`` (``questions[q]`` lists the YES token first). The question's weight
    is ``|e_q|``; the matched part ``w_YES + w_NO - |e_q|`` pays out whatever happens and counts
    as cash. ``corr`` holds the correlations of the questions' YES series, each question its
    own class (the unit of diversification: one question held has ``rho_intra`` 1, so it
    scores as concentrated), plus ``CASH``; a cross correlation is signed by both exposures
    (a NO position hedges a YES position on a positively correlated question). All NaN when
    no question is held (nothing at risk) or a needed correlation is undefined.
    """
    nan_result = {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}
    cash = float(weights.get("CASH", 0.0))
    class_weights: dict[str, float] = {}
    sign: dict[str, float] = {}
    for q, toks in questions.items():
        w_yes = float(weights.get(toks[0], 0.0)) if toks else 0.0
        w_no = float(weights.get(toks[1], 0.0)) if len(toks) > 1 else 0.0
        e = w_yes - w_no
        cash += w_yes + w_no - abs(e)
        if abs(e) > 1e-12:
            if q not in corr.classes:
                raise ValueError(f"question {q!r} missing from the correlations")
            class_weights[q] = abs(e)
            sign[q] = 1.0 if e > 0 else -1.0
    if not class_weights:
        return nan_result
    if cash > 1e-12:
        class_weights["cash"] = cash
        sign["cash"] = 1.0
    held = sorted(class_weights)
    pairs = {(c, d): corr.cross.get((c, d), _NAN) * sign[c] * sign[d]
             for i, c in enumerate(held) for d in held[i + 1 :]}
    intra = {c: corr.intra.get(c, 0.0 if c == "cash" else _NAN) for c in held}
    if not all(math.isfinite(x) for x in [*intra.values(), *pairs.values()]):
        return nan_result
    si = s_intra(class_weights, intra)
    se = s_inter(class_weights, pairs)
    return {"s_intra": si, "s_inter": se, "s_corr": 0.5 * si + 0.5 * se}


def _score_groups(groups: Sequence[tuple[np.ndarray, list[str], dict[str, np.ndarray]]],
                  intra: Mapping[str, float], cross: Mapping[tuple[str, str], float],
                  n_rows: int) -> np.ndarray:
    """Return ``n_rows x 3`` (s_intra, s_inter, s_corr) of rows grouped by held classes.

    Each group is ``(rows, classes, class_weights)``: the rows sharing one ordered set of held
    classes and each class's weight column over them. The arithmetic is :func:`s_intra` and
    :func:`s_inter`'s, operation for operation and in the same order, on whole columns (so each
    row's figures equal the scalar functions' bit for bit). A group with an undefined
    correlation is NaN; rows in no group stay NaN.
    """
    out = np.full((n_rows, 3), np.nan)
    for rows, classes, cw in groups:
        pairs = {(c, d): cross.get((c, d) if c < d else (d, c), _NAN)
                 for i, c in enumerate(classes) for d in classes[i + 1 :]}
        rhos = [intra.get(c, _NAN) for c in classes] + list(pairs.values())
        if not all(math.isfinite(x) for x in rhos):
            continue
        total = np.zeros(rows.size)
        for c in classes:
            total += cw[c] * max(float(intra[c]), 0.0)
        si = np.clip(1.0 - total, 0.0, 1.0)
        num = np.zeros(rows.size)
        den = np.zeros(rows.size)
        for i, c in enumerate(classes):
            for d in classes[i + 1 :]:
                ww = 2.0 * cw[c] * cw[d]
                num += ww * float(pairs[(c, d)])
                den += ww
        with np.errstate(divide="ignore", invalid="ignore"):
            se = np.where(den == 0.0, SINGLE_CLASS_S_INTER,
                          np.clip((1.0 - num / den) / 2.0, 0.0, 1.0))
        out[rows, 0] = si
        out[rows, 1] = se
        out[rows, 2] = 0.5 * si + 0.5 * se
    return out


def _same_rows(held: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Return each distinct row of the boolean matrix ``held`` with the indices of the rows
    equal to it (in order); the rows read as integers (one bit a column) when they fit in 62
    bits, a sort of numbers instead of ``np.unique``'s of whole rows."""
    if held.shape[1] > 62:
        patterns, inverse = np.unique(held, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
    else:
        codes = held.astype(np.int64) @ (np.int64(1) << np.arange(held.shape[1], dtype=np.int64))
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        patterns = held[first]
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(patterns)))[:-1]
    return list(zip(patterns, np.split(order, bounds), strict=True))


def diversification_rows(weights: np.ndarray, assets: Sequence[str], corr: ClassCorrelations,
                         held_eps: float = 0.0) -> np.ndarray:
    """Return ``T x 3`` (s_intra, s_inter, s_corr) of each row of a ``T x A`` weights matrix.

    Row ``t`` equals :func:`diversification` of ``{assets[j]: weights[t, j]}`` over the weights
    above ``held_eps``, bit for bit: rows holding the same assets share one ordered set of
    classes and are scored together (:func:`_score_groups`). NaN where :func:`diversification`
    is (nothing held, nothing at risk, an undefined correlation).
    """
    w = np.asarray(weights, dtype=float)
    held = w > max(held_eps, 0.0)
    groups: list[tuple[np.ndarray, list[str], dict[str, np.ndarray]]] = []
    if w.shape[0]:
        for pattern, rows in _same_rows(held):
            cols = np.flatnonzero(pattern).tolist()
            if not cols or all(assets[j] in corr.riskless for j in cols):
                continue
            cw: dict[str, np.ndarray] = {}
            for j in cols:
                a = assets[j]
                if a not in corr.classes:
                    raise ValueError(f"weighted asset {a!r} missing from assets")
                c = corr.classes[a]
                cw[c] = cw.get(c, 0.0) + w[rows, j]  # 0.0 + w first, as the scalar sum
            groups.append((rows, list(cw), cw))
    return _score_groups(groups, corr.intra, corr.cross, w.shape[0])


def signed_question_rows(weights: np.ndarray, assets: Sequence[str],
                         questions: Mapping[str, Sequence[str]], corr: ClassCorrelations
                         ) -> np.ndarray:
    """Return ``T x 3`` (s_intra, s_inter, s_corr) of each row, one exposure a question.

    ``weights`` is ``T x (A + 1)``: the weights of ``assets`` and CASH last. Row ``t`` equals
    :func:`signed_question_exposures` of that row's weights, bit for bit: rows with the same
    signs of exposure (and cash or not) are scored together, each cross correlation signed by
    both exposures.
    """
    w = np.asarray(weights, dtype=float)
    n = w.shape[0]
    col = {a: j for j, a in enumerate(assets)}
    cash = w[:, -1].copy() if n else np.zeros(0)
    zero = np.zeros(n)
    expo: dict[str, np.ndarray] = {}
    for q, toks in questions.items():
        w_yes = w[:, col[toks[0]]] if toks and toks[0] in col else zero
        w_no = w[:, col[toks[1]]] if len(toks) > 1 and toks[1] in col else zero
        e = w_yes - w_no
        cash += w_yes + w_no - np.abs(e)
        expo[q] = e
    names = list(expo)
    if not n or not names:
        return np.full((n, 3), np.nan)
    # Every row iterates its held classes in one fixed order (the questions', then cash), so
    # masked column operations over all rows repeat the scalar sums term for term.
    held = {q: np.abs(expo[q]) > 1e-12 for q in names}
    order = [*names, "cash"]
    held["cash"] = cash > 1e-12
    cw = {q: np.abs(expo[q]) for q in names} | {"cash": cash}
    sgn = {q: np.sign(expo[q]) for q in names} | {"cash": np.ones(n)}
    for q in names:
        if held[q].any() and q not in corr.classes:
            raise ValueError(f"question {q!r} missing from the correlations")
    any_q = np.logical_or.reduce([held[q] for q in names])
    bad = ~any_q
    total = np.zeros(n)
    for c in order:
        rho = corr.intra.get(c, 0.0 if c == "cash" else _NAN)
        if not math.isfinite(rho):
            bad |= held[c]
            continue
        total = np.where(held[c], total + cw[c] * max(float(rho), 0.0), total)
    num = np.zeros(n)
    den = np.zeros(n)
    for i, c in enumerate(order):
        for d in order[i + 1 :]:
            both = held[c] & held[d]
            if not both.any():
                continue
            key = (c, d) if c < d else (d, c)
            rho = corr.cross.get(key, _NAN)
            if not math.isfinite(rho):
                bad |= both
                continue
            ww = 2.0 * cw[c] * cw[d]
            signed = rho * (sgn[key[0]]) * (sgn[key[1]])
            num = np.where(both, num + ww * signed, num)
            den = np.where(both, den + ww, den)
    si = np.clip(1.0 - total, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.where(den == 0.0, SINGLE_CLASS_S_INTER,
                      np.clip((1.0 - num / den) / 2.0, 0.0, 1.0))
    out = np.column_stack([si, se, 0.5 * si + 0.5 * se])
    out[bad] = np.nan
    return out
