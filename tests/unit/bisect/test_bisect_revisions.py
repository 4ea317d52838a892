"""The bisect's revisions checked before anything runs, and its worktrees (titanflow.bisect.revisions), on scratch
git repositories."""

import subprocess

import pytest
from helpers.bisect_runs import chain, commit, git, scratch_repo

from titanflow.bisect.revisions import (
    RevisionError,
    check_range,
    checkout,
    commit_message,
    file_at,
    subject,
    worktree,
)


@pytest.fixture()
def repo(tmp_path):
    """base, then chain 1..3 on the main branch."""
    path = scratch_repo(tmp_path / "repo")
    chain(path, 3)
    return path


def test_a_good_ancestor_and_a_bad_descendant_resolve_to_full_hashes(repo):
    good, bad = check_range(repo, "HEAD~3", "HEAD")
    assert (good, bad) == (git(repo, "rev-parse", "HEAD~3"), git(repo, "rev-parse", "HEAD"))
    assert len(good) == 40 and subject(repo, bad) == "chain 3"


@pytest.mark.parametrize("good, bad, message", [
    ("nope", "HEAD", r"^good: 'nope' is not a commit of .*; fix: pass a hash, tag or branch that `git rev-parse` knows"),
    ("HEAD~1", "v9", r"^bad: 'v9' is not a commit of "),
    ("", "HEAD", r"^good: '' is not a commit of "),
    ("HEAD~1", "HEAD~1", r"^bad: 'HEAD~1' is the same commit as good 'HEAD~1' \([0-9a-f]{12}\)"),
    ("HEAD", "HEAD~2", r"^good: 'HEAD' \([0-9a-f]{12}\) is not an ancestor of bad 'HEAD~2' \([0-9a-f]{12}\); fix: pass a "
                       r"good revision from bad's history"),
    ("HEAD:README.md", "HEAD", r"^good: 'HEAD:README.md' is not a commit of "),  # a blob, not a commit
])
def test_revisions_that_cannot_be_bisected_are_refused_naming_the_field(repo, good, bad, message):
    with pytest.raises(RevisionError, match=message):
        check_range(repo, good, bad)


def test_a_good_revision_on_another_branch_is_not_an_ancestor(repo):
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "side", "HEAD~2")
    side = commit(repo, "side 1", {"side.md": "x\n"})
    with pytest.raises(RevisionError, match=rf"^good: '{side}' \({side[:12]}\) is not an ancestor of bad '{tip}'"):
        check_range(repo, side, tip)


def test_a_folder_outside_git_is_refused(tmp_path):
    with pytest.raises(RevisionError, match=r"^repo: .* is not a git checkout"):
        checkout(tmp_path)
    with pytest.raises(RevisionError, match=r"^repo: .*missing is not a git checkout \(no such folder\)"):
        checkout(tmp_path / "missing")


def test_checkout_is_the_top_of_the_work_tree(repo):
    (repo / "docs").mkdir(exist_ok=True)
    assert checkout(repo / "docs") == repo.resolve()


def test_messages_and_files_at_a_revision(repo):
    first = commit(repo, "Subject line\n\nBody paragraph.\n", {"pyproject.toml": "[project]\n"})
    assert commit_message(repo, first) == "Subject line\n\nBody paragraph."
    assert file_at(repo, first, "pyproject.toml") == b"[project]\n"
    assert file_at(repo, "HEAD~1", "pyproject.toml") is None


def test_a_worktree_holds_the_revision_and_is_removed_after_an_error(repo, tmp_path):
    revision = git(repo, "rev-parse", "HEAD~1")
    place = tmp_path / "trees" / revision[:12]
    with pytest.raises(RuntimeError, match="inside"):
        with worktree(repo, place, revision) as tree:
            assert (tree / "docs" / "chain.md").read_text() == "line 1\nline 2\n"
            assert git(tree, "rev-parse", "HEAD") == revision
            raise RuntimeError("inside")
    assert not place.exists()
    listed = git(repo, "worktree", "list", "--porcelain")
    assert str(place) not in listed and listed.count("worktree ") == 1


def test_a_worktree_whose_folder_is_taken_is_refused_by_git(repo, tmp_path):
    place = tmp_path / "taken"
    place.mkdir()
    (place / "file").write_text("x")
    with pytest.raises(subprocess.CalledProcessError):
        with worktree(repo, place, "HEAD"):
            pass
    assert (place / "file").read_text() == "x"  # git refused before touching it; nothing of ours removed it


def test_the_planted_lr_line_of_the_bisect_e2e_is_the_one_line_that_sets_the_default_lr():
    """tests/e2e/test_bisect_runs.py plants its regression by replacing LR_LINE in titanflow/params.py; a change to
    that line must fail here, in seconds, not after the e2e's four trainings."""
    from helpers.bisect_runs import LR_LINE, PLANTED_LR_LINE

    from titanflow.params import ScenarioRun
    from titanflow.paths import REPO_ROOT

    source = (REPO_ROOT / "titanflow" / "params.py").read_text()
    assert source.count(LR_LINE) == 1
    assert ScenarioRun.model_fields["lr"].default == float(LR_LINE.split("(")[1].rstrip(","))
    assert float(PLANTED_LR_LINE.split("(")[1].rstrip(",")) == 3e-3
