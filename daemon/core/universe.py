"""The default US-equity universe and the asset class (sector) of each of its stocks.

Shared by the ``[markets]`` and ``[[agents]]`` config sections and the leaderboard's PortBench
diversification scores.
"""

from __future__ import annotations

#: The default US-equity universe.
DEFAULT_EQUITIES: tuple[str, ...] = (
    "AAPL", "MSFT", "NVDA", "META", "JPM", "V", "XOM", "CAT",
    "TSLA", "PG", "KO", "AMZN", "WMT", "JNJ", "UNH",
)  # fmt: skip

#: Default asset classes (sectors) of the default universe, used by the PortBench diversification
#: scores (s_intra / s_inter / s_corr) of the leaderboard.
DEFAULT_ASSET_CLASSES: dict[str, str] = {
    "AAPL": "tech", "MSFT": "tech", "NVDA": "tech", "META": "tech", "AMZN": "tech",
    "JPM": "financials", "V": "financials",
    "XOM": "energy_industrials", "CAT": "energy_industrials",
    "TSLA": "consumer", "PG": "consumer", "KO": "consumer", "WMT": "consumer",
    "JNJ": "health", "UNH": "health",
}  # fmt: skip
