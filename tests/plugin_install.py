"""Make agent plugins installed for a test: a ``.dist-info`` with ``entry_points.txt`` on a path.

Entry points are discovered from distribution metadata on ``sys.path``; writing that metadata
into a temporary folder installs a plugin the way pip would register it, in milliseconds, for
this process (:func:`install`) or for a subprocess (``PYTHONPATH``, :func:`pythonpath`).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PLUGIN = ROOT / "examples" / "plugin_agent"
GROUP = "paperarena.agents"


def write_dist(site: Path, name: str, entry_points: dict[str, str], version: str = "0.1.0") -> Path:
    """Write the metadata of distribution ``name`` registering ``entry_points`` into ``site``."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dist


def install_example_plugin(site: Path) -> None:
    """Register the sample plugin of examples/plugin_agent (its pyproject's entry points)."""
    meta = tomllib.loads((EXAMPLE_PLUGIN / "pyproject.toml").read_text())["project"]
    write_dist(site, meta["name"], meta["entry-points"][GROUP], meta["version"])


def pythonpath(*paths: Path) -> str:
    """Return a PYTHONPATH holding ``paths`` (then any inherited one)."""
    parts = [str(p) for p in paths]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)
