"""A route's `allow_hosts` rules: what parses, what matches, which addresses a name may reach."""

from __future__ import annotations

import pytest

from wakeline.sandbox.hosts import AllowList, Rule, parse_rule, reachable


@pytest.mark.parametrize("text, normal", [
    ("api.anthropic.com", "api.anthropic.com"),
    ("API.OpenAI.com", "api.openai.com"),
    ("example.com:8443", "example.com:8443"),
    ("127.0.0.1:8080", "127.0.0.1:8080"),
    ("10.1.2.3", "10.1.2.3"),
    ("[::1]:8080", "[::1]:8080"),
    ("[2001:db8::1]", "[2001:db8::1]"),
    ("localhost", "localhost"),
])
def test_a_rule_parses_to_its_normal_form(text: str, normal: str) -> None:
    assert parse_rule(text) == normal


@pytest.mark.parametrize("text, said", [
    ("", "empty"),
    ("https://api.openai.com", "not a host name"),
    ("api.openai.com/v1", "not a host name"),
    ("*.openai.com", "wildcards"),
    ("example.com:0", "port"),
    ("example.com:70000", "port"),
    ("example.com:http", "port"),
    ("::1", "brackets"),
    ("[example.com]", "IPv6"),
    ("-bad-.com", "not a host name"),
    ("a" * 64 + ".com", "not a host name"),
])
def test_a_bad_rule_says_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_rule(text)


def test_a_host_alone_allows_ports_80_and_443_only() -> None:
    allow = AllowList(["api.openai.com", "example.com:8443", "[::1]:9000"])
    assert allow.match("api.openai.com", 443) is not None
    assert allow.match("API.openai.com.", 80) is not None
    assert allow.match("api.openai.com", 8443) is None
    assert allow.match("example.com", 8443) is not None
    assert allow.match("example.com", 443) is None
    assert allow.match("sub.api.openai.com", 443) is None  # names match exactly
    assert allow.match("::1", 9000) is not None


def test_a_name_never_reaches_this_hosts_own_addresses() -> None:
    name = Rule("models.example.com", (443,))
    assert reachable(name, "93.184.216.34")
    assert reachable(name, "10.0.0.7")  # a company's own network is the operator's choice
    for own in ("127.0.0.1", "127.1.2.3", "::1", "169.254.169.254", "0.0.0.0", "::ffff:127.0.0.1",
                "fe80::1%eth0", "224.0.0.1"):
        assert not reachable(name, own), own
    assert reachable(Rule("127.0.0.1", (8080,)), "127.0.0.1")  # an address rule gets exactly it
    assert reachable(Rule("localhost", (8080,)), "::1")
