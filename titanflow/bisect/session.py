"""git's own bisect, driven one probe at a time from a worktree of its own.

    with GitBisect(repo, folder / "state", good, bad) as bisect:
        while (step := bisect.step) is None:
            bisect.mark(bisect.candidate(), "good")     # or "bad", "skip": the probe's verdict
        step.first_bad, step.candidates, bisect.log()

Why git's bisect and not a binary search of our own: git picks each candidate as the commit that best
halves what is left of the commit graph, merges included (``git rev-list --bisect``), and it knows what
to do with a commit that cannot be judged (``git bisect skip``: it tries a commit near it, and when only
skipped commits are left it names them all rather than guessing). ``--no-checkout`` leaves the files
alone and moves ``BISECT_HEAD`` instead, since each probe runs in a worktree of its own. The bisect's
state (``BISECT_LOG``, ``refs/bisect/*``) belongs to its worktree (git keeps them per worktree), so it
never touches a bisect of the user's own checkout; ``git bisect log`` replays it (``git bisect replay``).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from titanflow.bisect.revisions import add_worktree, git, remove_worktree

#: git bisect's verdicts: the probe failed the check (bad), passed (good), or could not be judged (skip).
BisectVerdict = Literal["good", "bad", "skip"]

#: git bisect's last word when one commit is left (bisect.c: "%s is the first %s commit").
FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit$", re.MULTILINE)

#: git bisect's last word when only skipped commits are left (bisect.c, exit 2), the candidates one per line.
ONLY_SKIPPED = re.compile(r"The first bad commit could be any of:\n((?:[0-9a-f]{40}\n)+)")


@dataclass
class Step:
    """Where git bisect ended: ``first_bad`` (a full hash) when it found one commit, else None with the
    ``candidates`` it could not tell apart (only skipped commits left)."""

    first_bad: str | None
    candidates: list[str] = field(default_factory=list)


class GitBisect:
    """``git bisect start --no-checkout <bad> <good>`` in a detached worktree at ``state_dir`` (module docstring);
    a context manager: leaving it runs ``git bisect reset`` and removes the worktree, also on an error."""

    def __init__(self, repo: Path, state_dir: Path, good: str, bad: str):
        self.repo, self.state_dir, self.good, self.bad = repo, state_dir, good, bad
        self.step: Step | None = None

    def __enter__(self) -> "GitBisect":
        add_worktree(self.repo, self.state_dir, self.bad, files=False)
        try:
            self._git("bisect", "start", "--no-checkout", self.bad, self.good)
        except BaseException:
            remove_worktree(self.repo, self.state_dir)
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        git(self.state_dir, "bisect", "reset", check=False)
        remove_worktree(self.repo, self.state_dir)

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return git(self.state_dir, *args)

    def candidate(self) -> str:
        """The commit git asks to test next (``BISECT_HEAD``), a full hash.

        Raises:
            RuntimeError: the bisect has ended (:attr:`step` is set).
        """
        if self.step is not None:
            raise RuntimeError("the bisect has ended: nothing left to test")
        return self._git("rev-parse", "BISECT_HEAD").stdout.strip()

    def mark(self, revision: str, verdict: BisectVerdict) -> Step | None:
        """``git bisect <verdict> <revision>``; returns (and keeps in :attr:`step`) where the bisect ended,
        None while commits are left to test.

        Raises:
            subprocess.CalledProcessError: git refused the mark (its message on the error).
        """
        done = git(self.state_dir, "bisect", verdict, revision, check=False)
        output = done.stdout + done.stderr
        found = FIRST_BAD.search(output)
        if found:
            self.step = Step(first_bad=found.group(1))
        elif (skipped := ONLY_SKIPPED.search(output)) is not None:
            self.step = Step(first_bad=None, candidates=skipped.group(1).split())
        elif done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
        return self.step

    def log(self) -> str:
        """``git bisect log``: every mark so far, replayable with ``git bisect replay``."""
        return self._git("bisect", "log").stdout
