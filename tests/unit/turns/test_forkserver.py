"""The fork server: real helper, real children, real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers import wait_until
from tests.support.sandbox import require_bwrap
from wakeline.sandbox import netns
from wakeline.turns import forkserver as forkserver_module
from wakeline.turns.forkserver import Exited, ForkServer, SpawnFailed

ENV = {"PATH": os.environ["PATH"]}


@pytest.fixture
def forkserver() -> Iterator[ForkServer]:
    server = ForkServer()
    server.start()
    yield server
    server.stop()


def run(server: ForkServer, argv: list[str], cwd: Path,
        env: dict[str, str] = ENV) -> tuple[int | None, str]:
    """Spawn with stdout on a pipe; return the exit code and what it printed."""
    out_r, out_w = os.pipe()
    try:
        with open(os.devnull, "rb") as stdin:
            child = server.spawn(argv, str(cwd), env, (stdin.fileno(), out_w, out_w))
    finally:
        os.close(out_w)
    with os.fdopen(out_r, "rb") as out:
        text = out.read().decode()
    return child.wait(), text


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_the_child_runs_in_its_cwd_with_its_env_in_a_session_of_its_own(
        forkserver: ForkServer, tmp_path: Path) -> None:
    code, text = run(forkserver, ["sh", "-c", 'pwd; echo "$GREETING"; ps -o sid= -p $$; echo $$'],
                     tmp_path, {**ENV, "GREETING": "hello"})
    cwd, greeting, sid, pid = text.split()
    assert code == 0 and Path(cwd) == tmp_path and greeting == "hello" and sid == pid


def test_exit_codes_and_signals_come_back(forkserver: ForkServer, tmp_path: Path) -> None:
    assert run(forkserver, ["sh", "-c", "exit 2"], tmp_path)[0] == 2
    assert run(forkserver, ["sh", "-c", "kill -TERM $$"], tmp_path)[0] == -signal.SIGTERM


def test_the_child_gets_default_signal_dispositions(forkserver: ForkServer, tmp_path: Path) -> None:
    """The helper ignores SIGINT (and Python ignores SIGPIPE): its children must not."""
    _, text = run(forkserver, ["sh", "-c", "grep SigIgn /proc/$$/status"], tmp_path)
    ignored = int(text.split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)) and not ignored & (1 << (signal.SIGPIPE - 1))


def test_a_missing_program_or_directory_is_a_clear_spawn_error(
        forkserver: ForkServer, tmp_path: Path) -> None:
    with pytest.raises(SpawnFailed, match="FileNotFoundError"):
        run(forkserver, ["no-such-agent-here"], tmp_path)
    with pytest.raises(SpawnFailed, match="FileNotFoundError"):
        run(forkserver, ["true"], tmp_path / "gone")
    assert run(forkserver, ["true"], tmp_path)[0] == 0  # the connection is still good


def test_the_helper_has_an_empty_environment(forkserver: ForkServer) -> None:
    """None of the service's variables (its secrets among them) reach the helper."""
    assert forkserver.pid is not None
    assert Path(f"/proc/{forkserver.pid}/environ").read_bytes() == b""


def test_what_the_agent_left_in_its_group_ends_with_it(forkserver: ForkServer,
                                                       tmp_path: Path) -> None:
    code, text = run(forkserver, ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], tmp_path)
    assert code == 0
    wait_until(lambda: not alive(int(text)), message="the leftover sleep killed")


def test_a_dead_helper_is_started_again_and_every_thread_reconnects_to_it(
        forkserver: ForkServer, tmp_path: Path) -> None:
    """The thread that meets the dead helper fails once and restarts it; another thread's
    stale connection is replaced, and does not restart the new helper."""
    with ThreadPoolExecutor(1) as other:  # one thread, like a runner, keeping its connection
        assert other.submit(run, forkserver, ["true"], tmp_path).result(30)[0] == 0
        assert run(forkserver, ["true"], tmp_path)[0] == 0
        first = forkserver.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: not alive(first), message="the helper gone")
        with pytest.raises(SpawnFailed):
            run(forkserver, ["true"], tmp_path)
        assert run(forkserver, ["true"], tmp_path)[0] == 0
        second = forkserver.pid
        assert other.submit(run, forkserver, ["true"], tmp_path).result(30)[0] == 0
        assert forkserver.pid == second not in (None, first)


def test_when_the_service_is_killed_its_agents_end_too(tmp_path: Path) -> None:
    """kill -9 of the service: the helper sees its control socket close and ends every agent."""
    script = (
        "import os, sys\n"
        "from wakeline.turns.forkserver import ForkServer\n"
        "s = ForkServer(); s.start()\n"
        "c = s.spawn(['sleep', '60'], '/', {'PATH': os.environ['PATH']}, (0, 1, 2))\n"
        "print(c.pid, s.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    service = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, cwd=Path(__file__).parents[2])
    assert service.stdout is not None and service.stdin is not None
    agent, helper = (int(x) for x in service.stdout.readline().split())
    assert alive(agent) and alive(helper)
    service.kill()
    service.wait()
    service.stdin.close()
    service.stdout.close()
    wait_until(lambda: not alive(agent) and not alive(helper), message="agent and helper gone")


def test_a_captured_spawn_keeps_the_head_of_stdout_and_the_tail_of_stderr(
        forkserver: ForkServer, tmp_path: Path) -> None:
    script = "printf 0123456789abcdef; printf 'first\\nlast\\n' >&2; exit 3"
    with open(os.devnull, "rb") as stdin:
        child = forkserver.spawn(["sh", "-c", script], str(tmp_path), ENV, (stdin.fileno(),),
                                 capture=(10, 5))
    exited = child.finish()
    assert exited == Exited(3, stdout="0123456789", stdout_dropped=6, stderr="last\n")


def test_a_captured_spawn_ends_with_the_agent_although_a_grandchild_holds_its_pipes(
        forkserver: ForkServer, tmp_path: Path) -> None:
    with open(os.devnull, "rb") as stdin:
        child = forkserver.spawn(["sh", "-c", "sleep 60 & echo $!"], str(tmp_path), ENV,
                                 (stdin.fileno(),), capture=(1000, 1000))
    exited = child.finish()  # the sleep still holds stdout: the answer must not wait for it
    assert exited is not None and exited.code == 0
    wait_until(lambda: not alive(int(exited.stdout)), message="the leftover sleep killed")


def test_without_a_pidfd_the_capture_sees_the_exit_from_a_waiting_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "pidfd_open")
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    proc = subprocess.Popen(["sh", "-c", "echo out; echo err >&2; sleep 60 &"],
                            stdout=out_w, stderr=err_w, start_new_session=True)
    os.close(out_w)
    os.close(err_w)
    try:
        got = forkserver_module._capture(proc.pid, out_r, err_r, 100, 100)
        assert got == {"stdout": "out\n", "stdout_dropped": 0, "stderr": "err\n"}
        assert proc.wait(10) == 0  # seen exited, yet left for its parent to reap
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the sleep it left
        except ProcessLookupError:
            pass


def test_a_captured_spawn_whose_pid_cannot_be_answered_leaves_no_pipe_open(tmp_path: Path) -> None:
    # The helper's own code, in this process: its descriptors are the ones counted here.
    helper = forkserver_module._Helper(netns)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.close()  # the runner is gone before the pid can reach it
    before = set(os.listdir("/proc/self/fd"))
    stdin = os.open(os.devnull, os.O_RDONLY)
    request = {"argv": ["sleep", "30"], "cwd": str(tmp_path), "env": ENV, "capture": [64, 64]}
    try:
        with pytest.raises(OSError):
            helper._spawn(ours, request, [stdin])
        assert set(os.listdir("/proc/self/fd")) == before  # stdin and both pipes closed
    finally:
        ours.close()
        for pid in list(helper._running):
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


# --- a sandbox's own network (wakeline/sandbox/netns.py) --------------------------------------


def helper_fds(server: ForkServer) -> set[str]:
    return set(os.listdir(f"/proc/{server.pid}/fd"))


def test_a_sandboxs_own_network_reaches_the_unix_socket_given_until_the_sandbox_ends(
        forkserver: ForkServer, tmp_path: Path) -> None:
    bwrap = require_bwrap().bwrap
    path = tmp_path / "api.sock"
    heard: list[bytes] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(4)

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                heard.append(conn.recv(100))
                conn.sendall(b"wakeline here")

        threading.Thread(target=answer, daemon=True).start()
        sandbox = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net",
                   "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                   "--"]
        assert run(forkserver, ["true"], tmp_path)[0] == 0  # its connection to the helper
        before = helper_fds(forkserver)
        # The agent connects at once: the listener is there before it starts.
        agent = [sys.executable, "-I", "-S", "-c",
                 ("import socket; s = socket.create_connection(('127.0.0.2', 8788)); "
                  "s.sendall(b'from inside'); print(s.recv(100).decode())")]
        exited = run_listening(forkserver, [*sandbox, *agent], tmp_path, path)
    assert exited is not None and (exited.code, exited.stdout) == (0, "wakeline here\n"), exited
    assert heard == [b"from inside"]
    wait_until(lambda: helper_fds(forkserver) == before,
               message="the listeners and the relayed connection closed")


def test_a_sandbox_whose_network_cannot_be_reached_does_not_run(
        forkserver: ForkServer, tmp_path: Path) -> None:
    bwrap = require_bwrap().bwrap
    ran = tmp_path / "ran"
    argv = [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--bind", str(tmp_path),
            str(tmp_path), "--", "touch", str(ran)]  # no --unshare-net: the host's network
    with pytest.raises(SpawnFailed, match="no network of its own"):
        run_listening(forkserver, argv, tmp_path)
    with pytest.raises(SpawnFailed, match="did not say which process"):
        run_listening(forkserver, [bwrap, "--no-such-option", "--", "true"], tmp_path)
    assert not ran.exists()
    assert run(forkserver, ["true"], tmp_path)[0] == 0  # the connection is still good


def run_listening(server: ForkServer, argv: list[str], cwd: Path,
                  path: Path | None = None) -> Exited | None:
    """A captured spawn whose 127.0.0.2:8788 inside is relayed to `path`."""
    with open(os.devnull, "rb") as stdin:
        child = server.spawn(argv, str(cwd), ENV, (stdin.fileno(),), capture=(1000, 1000),
                             listen=[("127.0.0.2", 8788, str(path or cwd / "nothing.sock"))])
    return child.finish()
