"""git's own bisect driven one verdict at a time (titanflow.bisect.session.GitBisect), on a scratch chain: base
(good), then 8 commits of which number 5 is the planted one (bad from there on)."""

import math

import pytest
from helpers.bisect_runs import chain, git, scratch_repo

from titanflow.bisect.session import GitBisect

PLANT_AT, COMMITS = 5, 8


@pytest.fixture()
def commits(tmp_path):
    """[base, chain 1, ..., chain 8] as full hashes, and the repository."""
    repo = scratch_repo(tmp_path / "repo")
    return repo, [git(repo, "rev-parse", "HEAD"), *chain(repo, COMMITS, plant_at=PLANT_AT, plant={"lr.txt": "3e-3\n"})]


def drive(repo, hashes, state_dir, verdict_of):
    """Bisect hashes[0] (good) .. hashes[-1] (bad) marking each candidate with ``verdict_of(index)``; the tested
    indices in order and the bisect's end."""
    tested = []
    with GitBisect(repo, state_dir, hashes[0], hashes[-1]) as bisect:
        while bisect.step is None:
            index = hashes.index(bisect.candidate())
            tested.append(index)
            bisect.mark(hashes[index], verdict_of(index))
        log = bisect.log()
    return tested, bisect.step, log


def test_git_finds_the_plant_in_log2_n_probes_and_leaves_no_state(commits, tmp_path):
    repo, hashes = commits
    tested, step, log = drive(repo, hashes, tmp_path / "state", lambda i: "bad" if i >= PLANT_AT else "good")
    assert step.first_bad == hashes[PLANT_AT]
    assert len(tested) == math.ceil(math.log2(COMMITS)) == 3
    assert all(0 < i < COMMITS for i in tested)  # never an endpoint: git knows them
    assert f"# first bad commit: [{hashes[PLANT_AT]}] plant {PLANT_AT}" in log
    # the state was the worktree's own: gone with it, and the repository's refs untouched
    assert not (tmp_path / "state").exists()
    assert git(repo, "for-each-ref", "refs/bisect") == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_skipped_commit_makes_git_test_a_neighbour(commits, tmp_path):
    """Commit 6 (after the plant) cannot be judged: git tests another one and still finds the plant."""
    repo, hashes = commits
    tested, step, _ = drive(repo, hashes, tmp_path / "state",
                            lambda i: "skip" if i == PLANT_AT + 1 else ("bad" if i >= PLANT_AT else "good"))
    assert step.first_bad == hashes[PLANT_AT]
    assert tested.count(PLANT_AT + 1) == 1 and tested[-1] != PLANT_AT + 1


def test_a_skipped_commit_next_to_the_plant_leaves_both(commits, tmp_path):
    """Commit 4, the last good one, cannot be judged: with 3 good and 5 bad the first bad is 4 or 5."""
    repo, hashes = commits
    _, step, _ = drive(repo, hashes, tmp_path / "state",
                       lambda i: "skip" if i == PLANT_AT - 1 else ("bad" if i >= PLANT_AT else "good"))
    assert step.first_bad is None and set(step.candidates) == {hashes[PLANT_AT - 1], hashes[PLANT_AT]}


def test_when_only_skipped_commits_are_left_git_names_them_all(commits, tmp_path):
    """The plant and the commit after it cannot be judged: the first bad commit is one of plant, plant+1 and
    plant+2 (the first known bad), and git says so instead of guessing."""
    repo, hashes = commits

    def verdict(i):
        return "skip" if i in (PLANT_AT, PLANT_AT + 1) else ("bad" if i >= PLANT_AT else "good")

    _, step, _ = drive(repo, hashes, tmp_path / "state", verdict)
    assert step.first_bad is None
    assert set(step.candidates) == {hashes[PLANT_AT], hashes[PLANT_AT + 1], hashes[PLANT_AT + 2]}


def test_an_error_inside_ends_git_bisect_and_removes_its_worktree(commits, tmp_path):
    repo, hashes = commits
    with pytest.raises(RuntimeError, match="probe failed"):
        with GitBisect(repo, tmp_path / "state", hashes[0], hashes[-1]):
            raise RuntimeError("probe failed")
    assert not (tmp_path / "state").exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
