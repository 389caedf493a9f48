"""The first program of a confined turn without the host's network: relays, then the agent.

    python -I -S launcher.py [-u NAME | -e NAME=VALUE]... HOST:PORT=PATH... -- AGENT ARGV...

Inside its own network namespace a turn has a loopback and nothing else. This opens a
listening socket on each address given, forks a relay that carries every connection to it
to the Unix socket named (wakeline's API; under `network = "allow"`, its proxy), and then
becomes the agent (exec, so the agent is the sandbox's first process: its exit code and
the signals sent to its group are its own).

It runs once per turn, before the agent, so its start is on every turn's path: until the
fork it imports nothing but the interpreter's built-in modules (no `socket`, no wakeline).
The listening sockets are open before the agent starts, so a connection never finds nothing
there: the kernel holds it until the relay accepts. The relay is a grandchild that leaves
the agent's session (an agent's `wait` must not wait for it) and ignores the signals a stop
sends the agent's group, so that the agent's last calls during its grace period still get
through; it ends with the sandbox, as everything in it does.

`-u NAME` and `-e NAME=VALUE` put a variable back as the agent's environment had it: the
interpreter changes `LC_CTYPE` when the locale is C (PEP 538), and the agent must not see that.
"""

import _signal  # type: ignore[import-not-found]  # no stubs; `signal` would import enum
import _socket
import posix
import sys

FAILED = 125  # this program failed, not the agent (as env(1) and docker say it)
BACKLOG = 64
CHUNK = 65536


def _fail(message: str) -> None:
    posix.write(2, ("wakeline sandbox: " + message + "\n").encode("utf-8", "replace"))
    posix._exit(FAILED)


def _listen(spec: str) -> tuple[_socket.socket, str]:
    address, sep, path = spec.partition("=")
    host, _, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not path:
        _fail(f"bad relay {spec!r}: expected HOST:PORT=PATH")
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
        sock.listen(BACKLOG)
    except OSError as exc:
        _fail(f"cannot listen on {address}: {exc}")
    return sock, path


def _relay(listeners: list[tuple[_socket.socket, str]]) -> None:
    """The relay's whole life: accept on every listener, carry each connection both ways.

    Built-in modules only here too: the relay starts beside the agent, on the same CPUs."""
    import _thread

    def pump(src: _socket.socket, dst: _socket.socket, done: list[object]) -> None:
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock, how in ((dst, _socket.SHUT_WR), (src, _socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass
        with done[0]:  # type: ignore[attr-defined]
            done.append(None)
            last = len(done) == 3
        if last:  # both directions have ended
            src.close()
            dst.close()

    def serve(listener: _socket.socket, path: str) -> None:
        while True:
            fd, _ = listener._accept()  # type: ignore[attr-defined]
            client = _socket.socket(fileno=fd)
            upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                upstream.connect(path)
            except OSError:
                client.close()
                upstream.close()
                continue
            done: list[object] = [_thread.allocate_lock()]
            _thread.start_new_thread(pump, (client, upstream, done))
            _thread.start_new_thread(pump, (upstream, client, done))

    for listener, path in listeners[1:]:
        _thread.start_new_thread(serve, (listener, path))
    serve(*listeners[0])


def main(argv: list[str]) -> None:
    """Listen, fork the relay, become the agent."""
    if "--" not in argv:
        _fail("usage: launcher.py HOST:PORT=PATH ... -- ARGV...")
    at = argv.index("--")
    specs = argv[1:at]
    while specs and specs[0] in ("-u", "-e") and len(specs) > 1:
        flag, value = specs[0], specs[1]
        specs = specs[2:]
        name, _, setting = value.partition("=")
        if flag == "-u":
            posix.unsetenv(name)
        else:
            posix.putenv(name, setting)
    listeners = [_listen(spec) for spec in specs]
    command = argv[at + 1:]
    if not command:
        _fail("no command")
    if not listeners:
        _fail("no relay")
    child = posix.fork()
    if child == 0:  # its parent exits at once: the relay is nobody's child but init's
        if posix.fork() != 0:
            posix._exit(0)
        posix.setsid()
        for signum in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
            _signal.signal(signum, _signal.SIG_IGN)
        null = posix.open("/dev/null", posix.O_RDWR)
        for fd in (0, 1, 2):  # the agent's pipes end with the agent, not with the relay
            posix.dup2(null, fd)
        try:
            _relay(listeners)
        finally:
            posix._exit(0)
    posix.waitpid(child, 0)
    for sock, _ in listeners:
        sock.close()
    # The interpreter ignores these; an agent must start with the default dispositions.
    for signum in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(signum, _signal.SIG_DFL)
    try:
        posix.execv(command[0], command)
    except OSError as exc:
        _fail(f"cannot run {command[0]}: {exc.strerror or exc}")


if __name__ == "__main__":
    main(sys.argv)
