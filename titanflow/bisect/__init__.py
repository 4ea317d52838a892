"""Bisect: the first revision whose scenario run fails the check the bad revision fails (flows/bisection.py).

- :mod:`titanflow.bisect.revisions`: git revisions checked, commit messages, worktrees;
- :mod:`titanflow.bisect.session`: git's own bisect driven one probe at a time;
- :mod:`titanflow.bisect.verdict`: a probe's run as git bisect's good, bad or skip;
- :mod:`titanflow.bisect.environment`: which Python a revision's probe runs with;
- :mod:`titanflow.bisect.probe`: one probe, a ``qwen3-scenario`` run of a revision in its worktree;
- :mod:`titanflow.bisect.search`: the endpoints checked, then the search;
- :mod:`titanflow.bisect.record`: the result in the history folder (``_bisects.parquet``);
- :mod:`titanflow.bisect.packages`, :mod:`titanflow.bisect.overlay`, :mod:`titanflow.bisect.env_search`: the bisect
  over environments (flows/env_bisection.py): two package sets, their changes in order, each intermediate
  environment laid over the venv, the change that moves the verdict.
"""
