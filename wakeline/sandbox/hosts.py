"""A route's `allow_hosts`: the rules a confined turn's network requests are checked against.

A rule is `host` (ports 80 and 443) or `host:port`; a host is a DNS name, an IPv4 address or a
bracketed IPv6 address (`[::1]:8080`). Names match exactly, without case: a rule for
`example.com` does not allow `api.example.com`. This module knows no config and no socket: the
config validates each entry with `parse_rule`, the proxy asks an `AllowList`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

DEFAULT_PORTS = (80, 443)
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class Rule:
    """One allowed destination: a host and its ports."""

    host: str
    ports: tuple[int, ...]

    @property
    def literal(self) -> bool:
        """True when the rule names an address rather than a name."""
        return _address(self.host) is not None


def parse_rule(text: str) -> str:
    """`text` as a rule, normalised (lower case); a pydantic validator.

    Raises:
        ValueError: saying why it is not a `host` or `host:port` rule.
    """
    rule = _parse(text)
    host = f"[{rule.host}]" if ":" in rule.host else rule.host
    return host if rule.ports == DEFAULT_PORTS else f"{host}:{rule.ports[0]}"


def _parse(text: str) -> Rule:
    value = text.strip().lower()
    if not value:
        raise ValueError("an empty host")
    if "/" in value or "*" in value:
        raise ValueError(f"{text!r}: not a host name or address (no schemes, paths or "
                         "wildcards: `example.com` or `example.com:8443`)")
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or _address(host) is None or not isinstance(_address(host), ipaddress.IPv6Address):
            raise ValueError(f"{text!r}: not a bracketed IPv6 address")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected :port after the address")
        port = rest[1:] if rest else None
    else:
        if value.count(":") > 1:
            raise ValueError(f"{text!r}: write an IPv6 address in brackets, [::1]:8080")
        host, sep, port_text = value.partition(":")
        port = port_text if sep else None
        if _address(host) is None and not _is_name(host):
            raise ValueError(f"{text!r}: not a host name or address (no schemes, paths or "
                             "wildcards: `example.com` or `example.com:8443`)")
    if port is None:
        return Rule(host, DEFAULT_PORTS)
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return Rule(host, (int(port),))


def _is_name(host: str) -> bool:
    labels = host.split(".")
    return len(host) <= 253 and all(_LABEL.match(label) for label in labels)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class AllowList:
    """The rules of one route, asked per request."""

    def __init__(self, rules: list[str]) -> None:
        self._rules = [_parse(rule) for rule in rules]

    def match(self, host: str, port: int) -> Rule | None:
        """The rule that allows `host:port`, or None."""
        name = host.strip().lower().strip("[]").rstrip(".")
        for rule in self._rules:
            if rule.host == name and port in rule.ports:
                return rule
        return None


def reachable(rule: Rule, address: str) -> bool:
    """Whether a name rule may connect to `address`, one of the addresses its name resolved
    to: never the host's own loopback, link-local (a cloud's metadata service) or an
    unspecified or multicast address, which a public name pointed at this host would otherwise
    reach (DNS rebinding). A rule that names an address (or `localhost`) gets exactly it."""
    if rule.literal or rule.host == "localhost":
        return True
    ip = _address(address.split("%", 1)[0])
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)
