"""A turn's own network: listening in it from outside, before its agent starts.

Real bubblewrap, real namespaces: the agent connects to 127.0.0.2 the moment it starts, and
the test, outside, answers on the listening socket the fork server's code made in there.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sandbox import require_bwrap
from wakeline.sandbox import netns

PORT = 8788
# Connects at once: the listener must be there before the agent runs.
AGENT = [sys.executable, "-I", "-S", "-c",
         ("import socket; s = socket.create_connection(('127.0.0.2', 8788)); "
          "s.sendall(b'from inside'); print(s.recv(100).decode())")]


def bwrap(*options: str, command: list[str] = AGENT) -> list[str]:
    found = require_bwrap().bwrap
    return [found, "--unshare-user", "--unshare-pid", "--die-with-parent", *options,
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", *command]


@pytest.fixture(params=["thread", "child"])
def network(request: pytest.FixtureRequest) -> netns.SandboxNetwork:
    """Both ways into a sandbox's namespace: a thread (root only) and a child (anyone)."""
    if request.param == "thread" and os.geteuid() != 0:
        pytest.skip("joining from a thread takes root")
    return netns.SandboxNetwork(in_thread=request.param == "thread")


def start(network: netns.SandboxNetwork, argv: list[str],
          out: int) -> tuple[int, list[socket.socket]]:
    """bubblewrap started as the fork server starts it: its pid and the listeners."""
    argv, given, (info, block) = network.prepare(argv)
    pid = os.posix_spawn(argv[0], argv, {"PATH": os.environ["PATH"]}, setsid=True,
                         file_actions=[(os.POSIX_SPAWN_DUP2, out, 1),
                                       *((os.POSIX_SPAWN_DUP2, fd, to) for fd, to in given)])
    for fd, _ in given:
        os.close(fd)
    try:
        return pid, network.open(pid, info, block, [("127.0.0.2", PORT, "")])
    except OSError:
        os.waitpid(pid, 0)  # killed already
        raise


@pytest.fixture
def output() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        try:
            os.close(fd)
        except OSError:
            pass


def answer_once(listener: socket.socket) -> bytes:
    listener.settimeout(30)
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(30)
        data = conn.recv(100)
        conn.sendall(b"hello from outside")
    return data


def finish(pid: int, read: int, write: int) -> tuple[int, str]:
    os.close(write)
    with os.fdopen(read, "rb", closefd=False) as out:
        text = out.read().decode()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), text


def test_the_agent_reaches_a_listener_made_in_its_own_network_before_it_started(
        network: netns.SandboxNetwork, output: tuple[int, int]) -> None:
    read, write = output
    pid, listeners = start(network, bwrap("--unshare-net"), write)
    with listeners[0]:
        assert answer_once(listeners[0]) == b"from inside"
    assert finish(pid, read, write) == (0, "hello from outside\n")


def test_a_user_namespace_made_inside_the_sandbox_does_not_get_in_the_way(
        output: tuple[int, int]) -> None:
    # With `--uid`, bubblewrap makes a second user namespace late in its set-up; its members
    # could not join the network namespace, which the first one owns.
    read, write = output
    pid, listeners = start(netns.SandboxNetwork(in_thread=False),
                           bwrap("--unshare-net", "--uid", "4321"), write)
    with listeners[0]:
        assert answer_once(listeners[0]) == b"from inside"
    assert finish(pid, read, write) == (0, "hello from outside\n")


def test_a_sandbox_without_a_network_of_its_own_is_refused_and_never_runs(
        network: netns.SandboxNetwork, output: tuple[int, int], tmp_path: Path) -> None:
    _, write = output
    ran = tmp_path / "ran"
    with pytest.raises(OSError, match="no network of its own"):
        start(network, bwrap(command=["touch", str(ran)]), write)
    assert not ran.exists()


def test_a_bubblewrap_that_fails_at_once_is_an_error(network: netns.SandboxNetwork,
                                                     output: tuple[int, int]) -> None:
    _, write = output
    with pytest.raises(OSError, match="did not say which process"):
        start(network, bwrap("--no-such-option"), write)


def test_the_probe_runs_a_command_as_a_turn_runs(tmp_path: Path) -> None:
    assert netns.probe(bwrap("--unshare-net", command=["true"])) == 0
    assert netns.probe(bwrap("--unshare-net", command=["false"])) == 1
    assert netns.probe(bwrap(command=["true"])) == netns.PROBE_FAILED  # no network of its own
