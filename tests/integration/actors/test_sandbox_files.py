"""A confined turn's files, from the outside (CONTRACT section 12, invariant 15).

A real service runs tests/fakes/confined_agent.py in bubblewrap: it tries to read, list and
write what the test names and answers with what happened, and the test checks both its answer
(as Linear received it) and the host's files.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import LINEAR_KEY, OPERATOR_TOKEN, WEBHOOK_SECRET, on_postgres, session_event
from tests.helpers import git, wait_until
from tests.integration.actors.test_progress import answered, writes
from tests.support.sandbox import require_bwrap

CONFINED = Path(__file__).resolve().parents[2] / "fakes" / "confined_agent.py"
ROUTE = {"name": "eng", "teams": ["ENG"], "network": "off"}


@pytest.fixture(autouse=True)
def bwrap() -> None:
    require_bwrap()


def probe(harness: Callable[..., Any], spec: dict[str, Any], **kw: Any) -> tuple[Any, dict[str, Any]]:
    """Run one confined probe turn; its answer, parsed."""
    kw.setdefault("routes", [ROUTE])
    h = harness("probe", json.dumps(spec), script=CONFINED, sandbox={"mode": "required"}, **kw)
    h.deliver(session_event(session_id="s-1"))
    sent = answered(h.linear, timeout=30)
    assert sent[-1]["kind"] == "response", sent[-1]
    return h, json.loads(sent[-1]["body"])


def test_a_confined_agent_writes_only_its_workspace_its_home_and_its_writable_paths(
        harness: Callable[..., Any], tmp_path: Path) -> None:
    state = tmp_path / "state0"
    other = state / "workspaces" / "cv_someone_else"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("another conversation's work\n")
    cache = tmp_path / "shared-cache"
    mark = uuid.uuid4().hex
    service_home = Path.home() / f"wakeline-probe-{mark}"
    host_tmp = Path("/tmp") / f"wakeline-probe-{mark}"
    h, said = probe(harness, {
        "write": ["in-workspace.txt", f"{state}/homes/eng/in-home.txt", f"{cache}/in-cache.txt",
                  str(host_tmp), str(service_home), "/etc/wakeline-probe", "/usr/wakeline-probe",
                  f"{other}/x.txt", f"{state}/x.txt"],
        "read": [f"{other}/notes.txt"], "list": [str(state / "workspaces")]},
        routes=[{**ROUTE, "writable": [str(cache)]}])
    workspace = state / "workspaces" / h.only_conversation()["id"]
    wrote = said["write"]
    assert wrote["in-workspace.txt"] == "ok: written"
    assert (workspace / "in-workspace.txt").read_text().startswith("written from inside")
    assert (state / "homes" / "eng" / "in-home.txt").exists()
    assert (cache / "in-cache.txt").exists()
    assert wrote[str(host_tmp)] == "ok: written" and not host_tmp.exists()  # its own /tmp
    for path in (service_home, Path("/etc/wakeline-probe"), Path("/usr/wakeline-probe"),
                 other / "x.txt", state / "x.txt"):
        assert wrote[str(path)].startswith("error:"), (path, wrote[str(path)])
        assert not path.exists()
    assert "Read-only file system" in wrote[str(service_home)]
    assert said["read"][f"{other}/notes.txt"].startswith("error: FileNotFoundError")
    assert said["list"][str(state / "workspaces")] == f"ok: {[workspace.name]}"
    assert (state / "homes" / "eng").stat().st_mode & 0o777 == 0o700


def test_no_secret_of_wakelines_is_readable_or_in_the_environment(
        harness: Callable[..., Any], tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    files = {"linear-api-key": LINEAR_KEY, "hook": WEBHOOK_SECRET,
             "client-secret": "client-secret-5Rk2Lm9QxW3e"}
    for name, value in files.items():
        (secrets / name).write_text(value + "\n")
    conf = tmp_path / "conf" / "wakeline.toml"
    conf.parent.mkdir()
    conf.write_text("# the config file: never readable inside\n")
    state = tmp_path / "state0"
    state.mkdir()
    (state / "operator.token").write_text(OPERATOR_TOKEN + "\n")
    _, said = probe(harness, {
        "read": [*(str(secrets / n) for n in files), str(conf), str(state / "operator.token"),
                 str(state / "wakeline.db"), str(state / "journal" / "entries.jsonl")],
        "list": [str(state), str(state / "journal")],
        "run": [["sh", "-c", "ls -l /proc/self/fd/ | grep -c wakeline.db"]], "env": True},
        source=conf, linear_config={"api_key_file": str(secrets / "linear-api-key"),
                                    "webhook_secret_file": str(secrets / "hook"),
                                    "client_secret_file": str(secrets / "client-secret")})
    if not on_postgres():  # on PostgreSQL the store lives in its server
        assert (state / "wakeline.db").exists()
    for path, result in said["read"].items():
        assert result in ("ok: ", ) or result.startswith("error: FileNotFoundError"), (path, result)
    assert said["list"][str(state)] == "ok: ['homes', 'workspaces']"  # only its own mount points
    assert said["list"][str(state / "journal")].startswith("error: FileNotFoundError")
    assert said["run"]["sh -c ls -l /proc/self/fd/ | grep -c wakeline.db"].startswith("ok: 1 0")
    body = json.dumps(said)
    for value in (*files.values(), OPERATOR_TOKEN, "never readable inside"):
        assert value not in body
    env = said["env"]
    assert not [k for k in env if k.startswith("WAKELINE_") and k not in (
        "WAKELINE_CONVERSATION_ID", "WAKELINE_SESSION_ID", "WAKELINE_TURN_ID", "WAKELINE_API_URL",
        "WAKELINE_TOKEN", "WAKELINE_ISSUE_ID", "WAKELINE_ISSUE_IDENTIFIER")]
    assert env["WAKELINE_TOKEN"].startswith("wlt_")  # the turn's token: the only credential
    assert env["HOME"] == str(state / "homes" / "eng") and env["TMPDIR"] == "/tmp"
    assert "FAKE_AGENT_LOG" not in env  # a path nothing in the sandbox shows is dropped
    assert env["UNRELATED"] == "kept"


def test_a_worktree_commits_but_its_repositorys_hooks_and_config_stay_out_of_reach(
        harness: Callable[..., Any], repo: Path) -> None:
    common = repo / ".git"
    config_before = (common / "config").read_text()
    _, said = probe(harness, {
        "write": ["feature.txt", str(common / "hooks" / "post-checkout"), str(common / "config"),
                  ".git", str(repo / "README.md")],
        "run": [["git", "add", "feature.txt"], ["git", "commit", "-q", "-m", "from the sandbox"],
                ["sh", "-c", "git config core.hooksPath /tmp/mine; echo $?"]]},
        routes=[{**ROUTE, "repo": str(repo)}])
    wrote, ran = said["write"], said["run"]
    assert wrote["feature.txt"] == "ok: written"
    assert ran["git add feature.txt"] == "ok: 0"
    assert ran["git commit -q -m from the sandbox"] == "ok: 0", ran
    for path in (str(common / "hooks" / "post-checkout"), str(common / "config"), ".git"):
        assert "Read-only file system" in wrote[path], (path, wrote[path])
    assert (repo / "README.md").read_text() == "hello\n"  # the main checkout: not its to change
    assert "error: could not" in ran["sh -c git config core.hooksPath /tmp/mine; echo $?"]
    assert not (common / "hooks" / "post-checkout").exists()
    assert (common / "config").read_text() == config_before
    branch = git(repo, "branch", "--list", "--format=%(refname:short)", "eng-1*")
    assert git(repo, "log", "-1", "--format=%s", branch) == "from the sandbox"


def test_the_routes_home_is_kept_between_turns(harness: Callable[..., Any]) -> None:
    h, first = probe(harness, {"run": [["sh", "-c", "cat $HOME/memo.txt; echo kept > $HOME/memo.txt"]]})
    assert "No such file" in first["run"]["sh -c cat $HOME/memo.txt; echo kept > $HOME/memo.txt"]
    h.deliver(session_event("prompted", session_id="s-1"))
    wait_until(lambda: [w["kind"] for w in writes(h.linear)].count("response") == 2, timeout=30,
               message="the second turn answered")
    second = json.loads([w for w in writes(h.linear) if w["kind"] == "response"][-1]["body"])
    assert second["run"]["sh -c cat $HOME/memo.txt; echo kept > $HOME/memo.txt"] == "ok: 0 kept"


def test_the_issues_files_are_inside_the_workspace_a_confined_turn_sees(
        harness: Callable[..., Any]) -> None:
    from tests.fakes.linear import FakeLinear
    from wakeline.turns.files import file_name

    fake = FakeLinear(files_authorization=LINEAR_KEY).start()
    link = fake.upload(b"ERROR the clock went backwards\n", "app.log", "text/plain")
    local = f".wakeline/files/{file_name(link, 'text/plain')}"
    h = harness("probe", json.dumps({"read": [local], "list": [".wakeline/files"]}),
                script=CONFINED, sandbox={"mode": "required"}, routes=[ROUTE], linear=fake,
                linear_config={"uploads_url": fake.uploads_url})
    h.deliver(session_event(session_id="s-1", promptContext=f"<issue>see {link}</issue>"))
    sent = answered(h.linear, timeout=30)
    assert sent[-1]["kind"] == "response", sent[-1]
    said = json.loads(sent[-1]["body"])
    assert said["read"][local] == "ok: ERROR the clock went backwards\n"
    assert said["list"][".wakeline/files"] == f"ok: {[local.rsplit('/', 1)[1]]}"
