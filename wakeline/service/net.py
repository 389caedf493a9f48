"""HTTP sessions that never route a loopback request through a proxy.

Company laptops set `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY` without a `NO_PROXY`, and
`requests` then sends even `http://127.0.0.1:8788` to the proxy, which cannot reach the
user's own machine. Every call wakeline makes to a local server (the CLI to the operator
API, the demo to its own loopback servers, the service to a stand-in Linear) goes
direct; calls to anything else (Linear itself) still honour the proxy variables.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import requests

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(url: str) -> bool:
    """True when `url`'s host is this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    host = (urlsplit(url).hostname or "").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def http_session(url: str) -> requests.Session:
    """A session for requests to `url`'s host: direct to loopback, else as the environment
    says (proxies, `NO_PROXY`, CA bundles)."""
    session = requests.Session()
    session.trust_env = not is_loopback(url)
    return session
