"""A season's bundle replayed from its stored answers, no model called (issue 32, point 3):
the replay itself (``run``), the stored runs it replays (``runs``: a resumed replay's as one),
what it reads of the stored rows (``rows``) and how each kind of agent answers from them
(``agents``)."""

from daemon.app.bundle_replay.rows import first_decision_difference
from daemon.app.bundle_replay.run import (
    BundleReplayError,
    BundleReplayRefused,
    rebuilt_report,
    refusal,
    replay_store,
)

__all__ = ["BundleReplayError", "BundleReplayRefused", "first_decision_difference",
           "rebuilt_report", "refusal", "replay_store"]
