"""Whether bubblewrap can confine a turn here: asked once at start-up by really running it.

`bwrap --version` proves nothing: a kernel without unprivileged user namespaces, Ubuntu's
AppArmor restriction of them, a systemd unit's `RestrictNamespaces=` or
`RestrictAddressFamilies=` (no netlink: no loopback in a new network namespace) and a `/proc`
partly covered (`ProtectKernelTunables=`: no fresh `/proc` in a PID namespace) each stop it
only when it runs. So the probe runs `true` in a sandbox made with the same options a turn
gets (a network namespace only when a route needs one), with a timeout. With a network
namespace it runs it as the fork server does, listening inside before `true` starts
(`netns.py`, in an interpreter of its own): joining a sandbox's namespaces can be refused where
making them is not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from wakeline.config import Config
from wakeline.sandbox import netns
from wakeline.sandbox.layout import Layout, bwrap_argv

TIMEOUT_SECONDS = 10.0
INSTALL = "apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap"
USERNS = ("allow unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1 "
          "(Debian), or on Ubuntu 24.04 an AppArmor profile for bwrap "
          "(kernel.apparmor_restrict_unprivileged_userns); under systemd see the unit in "
          "docs/operations.md (RestrictNamespaces, RestrictAddressFamilies, "
          "ProtectKernelTunables)")


@dataclass(frozen=True)
class Probe:
    """What the probe found: the binary, whether it confines here, and why not."""

    bwrap: str  # the resolved path, or the configured name when not found
    available: bool
    detail: str
    fix: str | None = None


def probe_for(config: Config) -> Probe:
    """The start-up probe, with the namespaces this config's routes need."""
    bwrap = config.sandbox.bwrap
    if os.sep in bwrap:
        bwrap = str(config.path(bwrap))
    return probe(bwrap, network=any(r.network != "open" for r in config.routes))


def probe(bwrap: str, *, network: bool, timeout: float = TIMEOUT_SECONDS) -> Probe:
    """Run `true` confined as a turn would be (with a network namespace when `network`)."""
    found = bwrap if os.sep in bwrap else shutil.which(bwrap)
    if found is None or not os.path.exists(found):
        return Probe(bwrap, False, f"{bwrap}: not found",
                     f"{INSTALL}, or set sandbox.bwrap to its path")
    if not os.access(found, os.X_OK):
        return Probe(found, False, f"{found}: not executable", f"chmod +x {found}")
    scratch = Path("/tmp")
    layout = Layout(workspace=scratch, home=scratch, network="off" if network else "open",
                    hidden=(), secrets=(), tools=())
    argv = bwrap_argv(found, layout, ["true"])
    if network:
        argv = [sys.executable, "-I", "-S", netns.__file__, *argv]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=timeout, env={"PATH": "/usr/bin:/bin"},
                              check=False)
    except subprocess.TimeoutExpired:
        return Probe(found, False, f"{found} did not finish in {timeout:g} s", USERNS)
    except OSError as exc:
        return Probe(found, False, f"{found} cannot run: {exc.strerror or exc}", INSTALL)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return Probe(found, False, f"{found} cannot confine here: {said[:300]}", USERNS)
    what = ", network namespaces work, and listening in one's loopback" if network \
        else " namespaces work"
    return Probe(found, True, f"{found}: user, PID, mount, IPC{what}")
