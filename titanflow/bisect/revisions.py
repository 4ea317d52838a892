"""git for the bisect: the good and bad revisions checked before anything runs, commit messages, worktrees.

    repo = checkout(Path("."))                                   # the work tree's top folder
    good, bad = check_range(repo, "v1.2", "main")               # full hashes, or RevisionError
    with worktree(repo, folder / "worktrees" / bad[:12], bad) as tree:
        ...                                                      # the revision's files, removed after

Every call is ``git -C <repo> ...`` with its output captured; git's own message is kept in the errors.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

#: Seconds a git command may take (a worktree of this repository is written in well under a second).
GIT_TIMEOUT_S = 120


class RevisionError(ValueError):
    """A repository or revision the bisect cannot use; the message starts with the field (``repo``,
    ``good``, ``bad``) and says what to pass instead."""


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``git -C repo args...``, text output captured.

    Raises:
        subprocess.CalledProcessError: git exited non-zero and ``check`` (its stderr on the error).
    """
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check,
                          timeout=GIT_TIMEOUT_S)


def checkout(repo: Path | str) -> Path:
    """The top folder of the git work tree ``repo`` is in.

    Raises:
        RevisionError: ``repo`` is not a folder inside a git work tree.
    """
    repo = Path(repo).resolve()
    found = git(repo, "rev-parse", "--show-toplevel", check=False) if repo.is_dir() else None
    if found is None or found.returncode != 0:
        why = found.stderr.strip() if found is not None else "no such folder"
        raise RevisionError(f"repo: {repo} is not a git checkout ({why}); fix: pass --repo <a clone of titanflow>")
    return Path(found.stdout.strip())


def resolve(repo: Path, field: str, revision: str) -> str:
    """The full hash of the commit ``revision`` names in ``repo`` (``git rev-parse --verify <rev>^{commit}``).

    Raises:
        RevisionError: ``revision`` names no commit there; the message starts with ``field``.
    """
    found = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}", check=False)
    if found.returncode != 0 or not revision.strip():
        raise RevisionError(f"{field}: {revision!r} is not a commit of {repo}; fix: pass a hash, tag or branch that "
                            f"`git rev-parse` knows there (git log --oneline lists them)")
    return found.stdout.strip()


def check_range(repo: Path, good: str, bad: str) -> tuple[str, str]:
    """(good, bad) as full hashes, once ``good`` is a proper ancestor of ``bad`` (``git merge-base
    --is-ancestor``), so that git bisect has commits between them to search.

    Raises:
        RevisionError: a revision names no commit, both name the same one, or good is not an ancestor of bad.
    """
    good_hash, bad_hash = resolve(repo, "good", good), resolve(repo, "bad", bad)
    if good_hash == bad_hash:
        raise RevisionError(f"bad: {bad!r} is the same commit as good {good!r} ({good_hash[:12]}); fix: pass the first "
                            "revision known to fail as bad and an older one known to pass as good")
    if git(repo, "merge-base", "--is-ancestor", good_hash, bad_hash, check=False).returncode != 0:
        raise RevisionError(f"good: {good!r} ({good_hash[:12]}) is not an ancestor of bad {bad!r} ({bad_hash[:12]}); "
                            "fix: pass a good revision from bad's history (git merge-base --is-ancestor GOOD BAD)")
    return good_hash, bad_hash


def commit_message(repo: Path, revision: str) -> str:
    """The full commit message of ``revision`` (``git log -1 --format=%B``), without trailing blank lines."""
    return git(repo, "log", "-1", "--format=%B", revision).stdout.rstrip()


def subject(repo: Path, revision: str) -> str:
    """The first line of ``revision``'s commit message."""
    return git(repo, "log", "-1", "--format=%s", revision).stdout.strip()


def file_at(repo: Path, revision: str, path: str) -> bytes | None:
    """The bytes of ``path`` (relative to the repository root) at ``revision``; None when it has no such file."""
    found = subprocess.run(["git", "-C", str(repo), "show", f"{revision}:{path}"], capture_output=True,
                           timeout=GIT_TIMEOUT_S)
    return found.stdout if found.returncode == 0 else None


def add_worktree(repo: Path, path: Path, revision: str, *, files: bool = True) -> Path:
    """``git worktree add --detach path revision`` (``files`` False: ``--no-checkout``, git's state only); returns
    ``path``.

    Raises:
        subprocess.CalledProcessError: git refused (e.g. ``path`` exists and is not empty).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "--detach", *([] if files else ["--no-checkout"]), str(path), revision)
    return path


def remove_worktree(repo: Path, path: Path) -> None:
    """``git worktree remove --force path`` when git still has it, then ``git worktree prune`` (which forgets
    worktrees whose folder is gone). Never raises for a worktree already removed."""
    git(repo, "worktree", "remove", "--force", str(path), check=False)
    git(repo, "worktree", "prune", check=False)


@contextlib.contextmanager
def worktree(repo: Path, path: Path, revision: str, *, files: bool = True) -> Iterator[Path]:
    """:func:`add_worktree` for the block, :func:`remove_worktree` after it, also when it raises."""
    try:
        yield add_worktree(repo, path, revision, files=files)
    finally:
        remove_worktree(repo, path)
