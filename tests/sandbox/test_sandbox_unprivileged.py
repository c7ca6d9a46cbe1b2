"""The sandbox tests again as the shipped unit runs them: unprivileged, under its syscall filter.

When the suite runs as root (as in CI), this runs the attack suite and the sandbox's own tests
in a child pytest as uid 65534 with no capability and no_new_privs (tests/unprivileged.py),
under the system-call filter and namespace restrictions of systemd/paperarena.service
(tests/unit_filter.py): bubblewrap then makes its namespaces as the service would, and every
attack must be contained the same way. When the suite already runs unprivileged, those files
ran as that user in the suite itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ("tests/sandbox/test_sandbox_attacks.py", "tests/sandbox/test_sandbox_escapes.py",
         "tests/sandbox/test_sandbox.py", "tests/sandbox/test_sandbox_unit.py")


@pytest.mark.skipif(os.geteuid() != 0, reason="the suite already runs unprivileged: the sandbox"
                    " files ran as this user")
def test_the_sandbox_tests_pass_as_nobody() -> None:
    home = Path(tempfile.mkdtemp(prefix="sandbox-nobody-"))
    try:
        os.chown(home, 65534, 65534)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
               "TMPDIR": str(home), "PYTHONDONTWRITEBYTECODE": "1",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        cmd = [sys.executable, str(ROOT / "tests" / "unprivileged.py"), sys.base_prefix,
               str(ROOT), "--", "sh", "-c", 'echo "uid=$(id -u)"; exec "$@"', "sh",
               sys.executable, str(ROOT / "tests" / "unit_filter.py"),
               str(ROOT / "systemd" / "paperarena.service"), "--",
               sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
               "-n", "0", "-p", "no:warnings", f"--basetemp={home}/t", *FILES]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env,
                              timeout=1200, check=False)
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)
    out = done.stdout
    assert out.startswith("uid=65534\n"), out[:500] + done.stderr[-2000:]
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    summary = re.search(r"(\d+) passed", out)
    assert summary and int(summary.group(1)) >= 80, out[-2000:]
    assert not re.search(r"\d+ (failed|skipped|error)", out), out[-2000:]
