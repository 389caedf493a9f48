"""Workspaces: plain directories and git worktrees, against real repositories in tmp_path."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import git
from wakeline.errors import WorkspaceFailed
from wakeline.turns.workspaces import Placement, Retired, Workspaces, branch_name

BRANCH = "eng-123-fix-the-thing"


def commit(cwd: Path, name: str, text: str, message: str) -> None:
    """Write a file in `cwd` and commit it."""
    (cwd / name).write_text(text)
    git(cwd, "add", name)
    git(cwd, "commit", "--quiet", "-m", message)


def has_branch(repo: Path, name: str) -> bool:
    """True when `repo` has a local branch `name`."""
    return bool(git(repo, "branch", "--list", name))


@pytest.fixture
def spaces(tmp_path: Path) -> Workspaces:
    """Workspaces under tmp_path/spaces, run with the real git."""
    return Workspaces(tmp_path / "spaces")


def issue(spaces: Workspaces, repo: Path, conversation_id: str = "c1", **kw: str) -> Placement:
    """Prepare the workspace of issue ENG-123 "Fix the thing"."""
    return spaces.prepare(
        conversation_id, repo=repo, identifier="ENG-123", title="Fix the thing", **kw
    )


# --- branch names ----------------------------------------------------------------------


def test_branch_name_is_the_identifier_and_a_slug_of_the_title() -> None:
    assert branch_name("ENG-123", "Fix the thing!", "c1") == BRANCH


def test_branch_name_folds_unicode_to_ascii() -> None:
    name = branch_name("ENG-7", "Café crème — naïve façade", "c1")
    assert name == "eng-7-cafe-creme-naive-facade"


def test_branch_name_cuts_a_long_title_at_a_hyphen() -> None:
    title = "Make the ingress refuse deliveries that arrive much too late"
    full = "eng-123-make-the-ingress-refuse-deliveries-that-arrive-much-too-late"

    name = branch_name("ENG-123", title, "c1")

    assert name == "eng-123-make-the-ingress-refuse-deliveries-that"
    assert len(name) <= 48 and full.startswith(name) and full[len(name)] == "-"


@pytest.mark.parametrize("title", [None, "", "!!!", "日本語"])
def test_branch_name_without_a_usable_title_is_the_identifier(title: str | None) -> None:
    assert branch_name("ENG-9", title, "c1") == "eng-9"


def test_branch_name_without_identifier_starts_with_the_fallback() -> None:
    assert branch_name(None, None, "Conv_42") == "conv-42"
    assert branch_name(None, "Fix it", "Conv_42") == "conv-42-fix-it"
    assert branch_name("", None, "") == "workspace"


@given(st.text(max_size=80), st.text(max_size=80), st.text(max_size=40))
def test_branch_name_is_always_short_lower_case_and_hyphen_separated(
    identifier: str, title: str, fallback: str
) -> None:
    name = branch_name(identifier, title, fallback)
    assert len(name) <= 48
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)


@pytest.mark.parametrize(
    ("identifier", "title", "fallback"),
    [
        ("ENG-123", "Fix the thing", "c1"),
        ("ENG-1", "x" * 100, "c1"),
        ("-ENG-1.lock", "..HEAD@{1}~^:?*[\\ .lock", "c1"),
        (None, "/refs/heads/x/", "@"),
        ("", "", "--"),
    ],
)
def test_branch_names_are_valid_for_git(
    tmp_path: Path, identifier: str | None, title: str, fallback: str
) -> None:
    name = branch_name(identifier, title, fallback)
    assert git(tmp_path, "check-ref-format", "--branch", name) == name


# --- plain directories -----------------------------------------------------------------


def test_plain_directory_is_created_private_and_kept_on_retire(spaces: Workspaces) -> None:
    placement = spaces.prepare("c1", repo=None)

    assert placement == Placement(spaces.path_of("c1"), None)
    assert stat.S_IMODE(placement.path.stat().st_mode) == 0o700
    assert spaces.prepare("c1", repo=None) == placement
    retired = spaces.retire("c1", repo=None)
    assert retired == Retired(False, f"plain directory kept at {placement.path}")
    assert placement.path.is_dir()


def test_retire_of_a_missing_workspace_reports_it_removed(spaces: Workspaces, repo: Path) -> None:
    assert spaces.retire("c1", repo=repo) == Retired(True, "")
    assert spaces.retire("c1", repo=None) == Retired(True, "")


@pytest.mark.parametrize("conversation_id", ["", "..", "a/b"])
def test_conversation_id_that_cannot_name_a_directory_is_refused(
    spaces: Workspaces, conversation_id: str
) -> None:
    with pytest.raises(WorkspaceFailed, match="cannot name a directory"):
        spaces.prepare(conversation_id, repo=None)


# --- worktrees -------------------------------------------------------------------------


def test_worktree_is_created_on_an_issue_branch_from_main(spaces: Workspaces, repo: Path) -> None:
    placement = issue(spaces, repo)

    assert placement == Placement(spaces.path_of("c1"), BRANCH)
    assert (placement.path / "README.md").read_text() == "hello\n"
    assert git(placement.path, "symbolic-ref", "--short", "HEAD") == BRANCH
    assert git(placement.path, "rev-parse", "HEAD") == git(repo, "rev-parse", "main")
    assert stat.S_IMODE(placement.path.stat().st_mode) == 0o700


def test_worktree_starts_from_the_given_base(spaces: Workspaces, repo: Path) -> None:
    git(repo, "switch", "--quiet", "-c", "develop")
    commit(repo, "NEXT.md", "next\n", "next")
    git(repo, "switch", "--quiet", "main")

    placement = issue(spaces, repo, base="develop")

    assert (placement.path / "NEXT.md").read_text() == "next\n"


def test_branch_from_a_remote_base_does_not_track_it(
    spaces: Workspaces, repo: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", str(repo), str(clone))

    placement = issue(spaces, clone, base="origin/main")

    # Without an upstream, an agent's pull or push cannot reach the base branch.
    tracking = subprocess.run(
        ["git", "-C", str(clone), "config", "--get", f"branch.{placement.branch}.merge"],
        capture_output=True,
    )
    assert tracking.returncode == 1


def test_existing_worktree_is_reused(spaces: Workspaces, repo: Path) -> None:
    first = issue(spaces, repo)
    (first.path / "notes.txt").write_text("work in progress\n")

    again = spaces.prepare("c1", repo=repo, identifier="ENG-123", title="Renamed since")

    assert again == first
    assert (first.path / "notes.txt").read_text() == "work in progress\n"


def test_taken_branch_name_gets_a_random_suffix(spaces: Workspaces, repo: Path) -> None:
    git(repo, "branch", BRANCH)

    placement = issue(spaces, repo)

    assert placement.branch is not None
    assert re.fullmatch(rf"{BRANCH}-[0-9a-f]{{4}}", placement.branch)
    assert git(placement.path, "symbolic-ref", "--short", "HEAD") == placement.branch


def test_recorded_branch_is_reused_with_the_agents_commits(spaces: Workspaces, repo: Path) -> None:
    first = issue(spaces, repo)
    commit(first.path, "fix.py", "print('fixed')\n", "the agent's fix")
    assert spaces.retire("c1", repo=repo) == Retired(True, "")

    again = issue(spaces, repo, branch=BRANCH)

    assert again == first
    assert git(again.path, "log", "-1", "--format=%s") == "the agent's fix"
    assert (again.path / "fix.py").is_file()


def test_clean_worktree_is_removed_and_its_branch_kept(spaces: Workspaces, repo: Path) -> None:
    placement = issue(spaces, repo)

    assert spaces.retire("c1", repo=repo) == Retired(True, "")

    assert not placement.path.exists()
    assert has_branch(repo, BRANCH)
    assert str(placement.path) not in git(repo, "worktree", "list", "--porcelain")


def test_worktree_with_a_changed_file_is_kept_whole(spaces: Workspaces, repo: Path) -> None:
    placement = issue(spaces, repo)
    (placement.path / "README.md").write_text("edited\n")

    retired = spaces.retire("c1", repo=repo)

    assert retired == Retired(False, f"1 changed or untracked file; kept at {placement.path}")
    assert (placement.path / "README.md").read_text() == "edited\n"


def test_worktree_with_untracked_files_is_kept_whole(spaces: Workspaces, repo: Path) -> None:
    placement = issue(spaces, repo)
    (placement.path / "new").mkdir()
    (placement.path / "new" / "a.txt").write_text("a\n")
    (placement.path / "new" / "b.txt").write_text("b\n")

    retired = spaces.retire("c1", repo=repo)

    assert retired == Retired(False, f"2 changed or untracked files; kept at {placement.path}")
    assert (placement.path / "new" / "b.txt").is_file()


def test_worktree_deleted_by_hand_is_added_again(spaces: Workspaces, repo: Path) -> None:
    first = issue(spaces, repo)
    shutil.rmtree(first.path)

    again = issue(spaces, repo, branch=BRANCH)

    assert again == first
    assert (again.path / "README.md").is_file()


def test_empty_leftover_directory_becomes_a_worktree(spaces: Workspaces, repo: Path) -> None:
    spaces.path_of("c1").mkdir(parents=True)

    placement = issue(spaces, repo)

    assert placement.branch == BRANCH
    assert (placement.path / "README.md").is_file()


def test_leftover_directory_with_files_is_in_the_way(spaces: Workspaces, repo: Path) -> None:
    path = spaces.path_of("c1")
    path.mkdir(parents=True)
    (path / "keep.txt").write_text("mine\n")

    with pytest.raises(WorkspaceFailed, match="is in the way") as failed:
        issue(spaces, repo)

    assert failed.value.code == "workspace_failed"
    assert (path / "keep.txt").read_text() == "mine\n"
    # Retiring it against the repository keeps it too.
    retired = spaces.retire("c1", repo=repo)
    assert retired == Retired(False, f"{path} is not a worktree of {repo}; kept")
    assert path.is_dir()


def test_retire_keeps_the_worktree_when_the_repo_is_gone(spaces: Workspaces, repo: Path) -> None:
    placement = issue(spaces, repo)
    shutil.rmtree(repo)

    retired = spaces.retire("c1", repo=repo)

    assert retired == Retired(False, f"repo {repo} does not exist; kept at {placement.path}")
    assert placement.path.is_dir()


def test_git_refusal_is_reported_with_gits_own_words(spaces: Workspaces, repo: Path) -> None:
    # The recorded branch is checked out in the repository itself, so git will not add it.
    with pytest.raises(WorkspaceFailed, match="already checked out") as failed:
        issue(spaces, repo, branch="main")

    assert len(failed.value.detail) <= 300


# --- unusable repositories and git ------------------------------------------------------


@pytest.mark.parametrize("case", ["missing", "plain", "subdirectory", "empty", "no base"])
def test_unusable_repo_is_refused_with_the_reason(
    spaces: Workspaces, repo: Path, tmp_path: Path, case: str
) -> None:
    base = ""
    if case == "missing":
        target, reason = tmp_path / "nowhere", f"repo {tmp_path / 'nowhere'} does not exist"
    elif case == "plain":
        target = tmp_path / "plain"
        target.mkdir()
        reason = f"{target} is not a git repository"
    elif case == "subdirectory":
        target = repo / "docs"
        target.mkdir()
        reason = f"{target} is inside a git repository but is not its top level"
    elif case == "empty":
        target = tmp_path / "empty"
        git(tmp_path, "init", "--quiet", str(target))
        reason = f"{target} has no commits"
    else:
        target, base, reason = repo, "release", f"branch release does not exist in {repo}"

    assert spaces.check_repo(target, base) == reason
    with pytest.raises(WorkspaceFailed) as failed:
        spaces.prepare("c1", repo=target, base=base, identifier="ENG-1")
    assert failed.value.detail == reason
    assert not spaces.path_of("c1").exists()


def test_usable_repo_passes_the_check(spaces: Workspaces, repo: Path) -> None:
    assert spaces.check_repo(repo) is None
    assert spaces.check_repo(repo, "main") is None
    assert spaces.check_repo(repo, git(repo, "rev-parse", "HEAD")) is None


def test_hanging_git_times_out(tmp_path: Path, repo: Path) -> None:
    hang = tmp_path / "hanging-git"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    spaces = Workspaces(tmp_path / "spaces", git=str(hang), timeout_seconds=0.5)

    with pytest.raises(WorkspaceFailed, match=r"^git rev-parse timed out after 0\.5 s$"):
        issue(spaces, repo)
    assert spaces.check_repo(repo) == "git rev-parse timed out after 0.5 s"


def test_missing_git_program_is_reported(tmp_path: Path, repo: Path) -> None:
    spaces = Workspaces(tmp_path / "spaces", git=str(tmp_path / "no-git"))

    with pytest.raises(WorkspaceFailed, match="cannot run .*no-git"):
        issue(spaces, repo)
    assert spaces.check_repo(repo) == f"cannot run {tmp_path / 'no-git'}: No such file or directory"


def test_concurrent_prepares_on_one_repo_succeed_one_git_at_a_time(
    tmp_path: Path, repo: Path
) -> None:
    # Real git behind a wrapper that notes whenever two of its runs overlap.
    busy, overlaps = tmp_path / "busy", tmp_path / "overlaps"
    wrapper = tmp_path / "git-once"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"mkdir '{busy}' 2>/dev/null || echo overlap >> '{overlaps}'\n"
        'git "$@"; rc=$?\n'
        f"rmdir '{busy}' 2>/dev/null\n"
        "exit $rc\n"
    )
    wrapper.chmod(0o755)
    spaces = Workspaces(tmp_path / "spaces", git=str(wrapper))
    start = threading.Barrier(4)
    placements: dict[str, Placement] = {}
    errors: list[BaseException] = []

    def prepare(conversation_id: str) -> None:
        start.wait()
        try:
            placements[conversation_id] = spaces.prepare(
                conversation_id, repo=repo, identifier="ENG-1", title=conversation_id
            )
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=prepare, args=(f"c{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    branches = {c: p.branch for c, p in placements.items()}
    assert branches == {f"c{i}": f"eng-1-c{i}" for i in range(4)}
    assert all((p.path / "README.md").is_file() for p in placements.values())
    assert not overlaps.exists()


def test_a_snapshot_puts_back_whatever_a_turn_changed(spaces: Workspaces, repo: Path,
                                                      tmp_path: Path) -> None:
    ws = spaces
    path = issue(spaces, repo).path
    (path / "notes.txt").write_text("kept: untracked before the turn\n")
    (path / "README.md").write_text("edited before the turn\n")  # uncommitted, kept too
    snap = ws.snapshot(path)
    assert snap is not None and not ws.restore(path, snap)  # nothing changed yet
    (path / "README.md").write_text("changed during planning\n")
    (path / "new.txt").write_text("new\n")
    (path / "notes.txt").unlink()
    git(path, "add", "-A")
    git(path, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "sneaky")
    assert ws.restore(path, snap)
    assert (path / "README.md").read_text() == "edited before the turn\n"
    assert (path / "notes.txt").read_text() == "kept: untracked before the turn\n"
    assert not (path / "new.txt").exists()
    assert git(path, "rev-parse", "HEAD").strip() == snap.head
    assert {line.strip() for line in git(path, "status", "--porcelain").splitlines()} == {
        "M README.md", "?? notes.txt"}
    assert ws.snapshot(tmp_path / "plain") is None  # not a git checkout: nothing to keep


def test_wakelines_own_git_never_runs_a_hook_or_an_fsmonitor_command(
        spaces: Workspaces, repo: Path, tmp_path: Path) -> None:
    """It runs outside any sandbox, in worktrees confined agents write (decision 0034): a hook
    or `core.fsmonitor` there would run what an agent chose, as the service user."""
    ran = tmp_path / "ran"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\necho hook >> {ran}\n")
    hook.chmod(0o755)
    monitor = tmp_path / "monitor.sh"
    monitor.write_text(f"#!/bin/sh\necho fsmonitor >> {ran}\n")
    monitor.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(monitor))
    placement = spaces.prepare("cv_1", repo=repo, identifier="ENG-1", title="hooks")
    (placement.path / "new.txt").write_text("x\n")
    assert not spaces.retire("cv_1", repo=repo).removed  # git status ran
    spaces.snapshot(placement.path)
    assert not ran.exists()
