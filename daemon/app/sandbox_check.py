"""The start-up check of the strategy sandbox: refuse, or warn, before any agent is built.

``check-config``, ``run``, ``replay`` and ``replay-evaluate`` call :func:`sandbox_problem` when the
config has an AlphaForgeBench agent: one worker is started as strategies would be
(:func:`agents.alphaforgebench.isolation.probe`). If a layer cannot be had on this host the
command fails with one line naming it (exit 2), unless ``[sandbox] allow_degraded = true``: then
a warning line is written (stderr and the log) at every start, ``/api/status`` and ``paperarena
status`` say "degraded", and workers run with what the host has.
"""

from __future__ import annotations

import sys
from typing import TextIO

from agents.alphaforgebench.agent import PROTOCOL
from agents.alphaforgebench.isolation import configure, probe
from daemon.config.settings import Config


def sandbox_problem(cfg: Config, out: TextIO | None = None) -> str | None:
    """Probe the sandbox if ``cfg`` runs strategy code; return the refusal line, or None.

    ``out`` (``check-config``) gets the probe's line when every layer is on.
    """
    agents = sorted(a.id for a in cfg.agents if a.protocol == PROTOCOL)
    if not agents:
        return None
    found = probe(cfg.sandbox)
    if found.missing and not cfg.sandbox.allow_degraded:
        names = ", ".join(agents)
        return (f"{found.line()}: refusing to run the AlphaForgeBench agent(s) {names} "
                "(install or allow what is missing, see docs/protocol-alphaforgebench.md "
                "\"The sandbox\"; [sandbox] allow_degraded = true runs them without it)")
    configure(found.policy(cfg.sandbox), found.missing)
    if found.missing:  # logging is not configured yet: one line on stderr (the journal)
        exposed = (" strategy code can read the provider keys and every file the daemon can;"
                   if "seccomp" in found.missing and "bubblewrap" in found.missing else "")
        sys.stderr.write(f"warning: {found.line()}: AlphaForgeBench strategies run DEGRADED"
                         f" ([sandbox] allow_degraded = true);{exposed} install what is"
                         " missing\n")
    elif out is not None:
        out.write(found.line() + "\n")
    return None
