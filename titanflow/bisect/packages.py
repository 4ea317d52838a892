"""Two environments as package sets, what differs between them, and the order a bisect applies the differences in.

    good = read_env_file("good_env", Path("good.txt"))          # pins of a pip constraints/requirements file
    bad, bad_run = run_environment("bad_run", "native-cpu-random-20261205-0200-ab12")   # a run's recorded stack
    changes = order_changes(package_changes(good, bad), requires)   # dependencies first, then by name
    packages_at(good.packages, changes, k)                          # the good one with the first k changes

An environment is ``{name: version}`` (names as PEP 503 normalises them, the form of the run record's
``stack.distributions``: titanflow.judge.environment.installed_stack) and the pip options it installs with (a
constraints file's ``--find-links``, ``--index-url``, ``--extra-index-url``, ``--no-index`` lines).

The order: a change of a package comes after the changes of the packages it requires (their ``Requires-Dist`` in
the bad environment's versions, among the changed packages only), ties and cycles by name; removals last, by name.
Why dependencies first: the bisect's intermediate environments are the good one with a prefix of the changes, and a
newer dependency under an older dependent is what releases are built to allow (a dependent's new version usually
raises its lower bound, seldom a dependency its own), so each prefix is an environment pip could have made; a
removal last because nothing the bad environment keeps needs the removed package. By name everywhere else, so one
pair of environments always gives one order (the bisect is repeatable, and its table reads the same each time).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict

from titanflow.paths import REPO_ROOT, runs_root
from titanflow.record.summary import SUMMARY, RunSummary, read_summary

#: pip options a constraints file may carry that say where packages come from; they are passed to pip as written.
SOURCE_OPTIONS = ("--find-links", "-f", "--index-url", "-i", "--extra-index-url", "--no-index")


class Environment(BaseModel):
    """A package set: ``label`` (the file or run it came from), ``packages`` {name: version}, ``pip_options`` (where
    pip finds them: the file's source lines as arguments, [] for a run's stack)."""

    label: str
    packages: dict[str, str]
    pip_options: list[str] = []


class PackageChange(BaseModel):
    """One package that differs: ``before`` (the good environment's version, None: added) and ``after`` (the bad's,
    None: removed)."""

    model_config = ConfigDict(frozen=True)

    name: str
    before: str | None
    after: str | None

    def __str__(self) -> str:
        if self.before is None:
            return f"+{self.name} {self.after}"
        if self.after is None:
            return f"-{self.name} {self.before}"
        return f"{self.name} {self.before} -> {self.after}"


def _is_titanflow(line: str) -> bool:
    """Whether a constraints line installs titanflow itself: ``-e git+...#egg=titanflow``, ``-e <this checkout>``,
    ``titanflow @ file://...`` or ``titanflow==...``, as pip freeze writes titanflow's own venv."""
    egg = re.search(r"[#&]egg=([A-Za-z0-9_.-]+)", line)
    if egg:
        return canonicalize_name(egg.group(1)) == "titanflow"
    words = line.split()
    if words and words[0] in ("-e", "--editable") and len(words) > 1:
        return Path(words[1].removeprefix("file://")).resolve() == REPO_ROOT
    name = re.match(r"[A-Za-z0-9_.-]+", line)
    return name is not None and canonicalize_name(name.group(0)) == "titanflow"


def read_env_file(field: str, path: Path | str) -> Environment:
    """The pins of a pip constraints or requirements file: one ``name==version`` per line (an environment marker
    and ``#`` comments allowed), plus the :data:`SOURCE_OPTIONS` lines, relative folders read from the file's.
    titanflow's own line, in any form pip freeze writes it, is left out: every probe runs the bisect's ``--revision``.

    Raises:
        ValueError: ``field`` first, then the file, the line and the fix: a file that is missing, a line that is not
            a requirement, a requirement that is not pinned with ``==``, an editable install of another package, a
            package pinned twice, no pin at all.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{field}: {path} is not a file; fix: pass a pip constraints file of name==version lines "
                         "(pip freeze writes one)")
    packages: dict[str, str] = {}
    options: list[str] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{field}: {path} line {number} {line!r}"
        if _is_titanflow(line):
            continue  # pip freeze of titanflow's own venv lists its checkout: the probes run --revision's code
        if line.startswith(("-e ", "--editable")):
            raise ValueError(f"{where}: an editable install is a checkout, not a version; fix: pin the package as "
                             "name==version, or leave the line out")
        if line.startswith("-"):
            words = shlex.split(line.replace("=", " ", 1) if line.startswith("--") else line)
            if words[0] not in SOURCE_OPTIONS:
                raise ValueError(f"{where}: the option {words[0]} is not one an environment takes; fix: keep pins and "
                                 f"the source options ({', '.join(SOURCE_OPTIONS)}) only")
            if len(words) > 1 and not words[1].startswith(("http://", "https://", "file:")):
                words[1] = str((path.parent / words[1]).resolve())
            options += words
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as err:
            raise ValueError(f"{where} does not parse as a requirement ({err}); fix: write name==version") from None
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        pins = [s.version for s in requirement.specifier if s.operator == "=="]
        if len(requirement.specifier) != 1 or not pins or requirement.url:
            raise ValueError(f"{where} is not pinned to one version; fix: write {requirement.name}==<version> (an "
                             "environment is exact: pip freeze writes one)")
        name = canonicalize_name(requirement.name)
        if name in packages:
            raise ValueError(f"{where} pins {name} a second time; fix: keep one line per package")
        packages[name] = pins[0]
    if not packages:
        raise ValueError(f"{field}: {path} pins no package; fix: write name==version lines (pip freeze > {path.name})")
    return Environment(label=str(path), packages=dict(sorted(packages.items())), pip_options=options)


def run_environment(field: str, ref: str, runs_dir: Path | None = None) -> tuple[Environment, RunSummary, Path]:
    """The package set a run recorded (summary.json's ``stack.distributions``), its summary and its folder; ``ref``
    is a run folder or a run id under ``runs_dir`` (default titanflow.paths.runs_root).

    Raises:
        ValueError: ``field`` first and the fix: no such run, a summary that does not read, or a run recorded
            before its record kept the installed stack.
    """
    root = runs_dir or runs_root()
    folder = next((f for f in (Path(ref), root / ref) if (f / SUMMARY).is_file()), None)
    if folder is None:
        raise ValueError(f"{field}: {ref!r} is neither a run folder nor a run id under {root} with a {SUMMARY}; fix: "
                         "pass a run id that `titanflow history --last 20` lists, or a run folder's path")
    try:
        summary = read_summary(folder / SUMMARY)
    except ValueError as err:
        raise ValueError(f"{field}: {folder / SUMMARY} does not read ({err}); fix: pass another run") from None
    distributions = (summary.stack or {}).get("distributions")
    if not distributions:
        raise ValueError(f"{field}: the run {summary.run_id} has no installed stack in {folder / SUMMARY} (recorded "
                         "before runs kept it); fix: pass a newer run, or a constraints file with --good-env/--bad-env")
    packages = {canonicalize_name(name): version for name, version in distributions.items()}
    return Environment(label=f"run {summary.run_id}", packages=dict(sorted(packages.items()))), summary, folder


def package_changes(good: dict[str, str], bad: dict[str, str]) -> list[PackageChange]:
    """Every package whose version differs between ``good`` and ``bad`` (added, removed or changed), by name."""
    return [PackageChange(name=name, before=good.get(name), after=bad.get(name))
            for name in sorted(set(good) | set(bad)) if good.get(name) != bad.get(name)]


def order_changes(changes: list[PackageChange], requires: dict[str, set[str]]) -> list[PackageChange]:
    """``changes`` in the bisect's order (module docstring): added and changed packages after the changed packages
    they require (``requires``: name -> names its bad version requires), ties by name, a cycle broken by name; then
    the removals, by name. Written here rather than with graphlib: its TopologicalSorter hands out every ready node
    at once, and the order wanted is one at a time, the first by name."""
    kept = {c.name: c for c in changes if c.after is not None}
    waiting = {name: {r for r in requires.get(name, set()) if r in kept and r != name} for name in kept}
    ordered: list[str] = []
    while waiting:  # Kahn's order, one package at a time, the first by name of those whose requirements are in
        ready = [name for name, needs in waiting.items() if not needs] or list(waiting)  # a cycle: by name
        name = min(ready)
        ordered.append(name)
        del waiting[name]
        for needs in waiting.values():
            needs.discard(name)
    return [kept[name] for name in ordered] + sorted((c for c in changes if c.after is None), key=lambda c: c.name)


def packages_at(good: dict[str, str], changes: list[PackageChange], k: int) -> dict[str, str]:
    """The good package set with the first ``k`` of ``changes`` applied (0: good; len(changes): bad)."""
    packages = dict(good)
    for change in changes[:k]:
        if change.after is None:
            packages.pop(change.name, None)
        else:
            packages[change.name] = change.after
    return dict(sorted(packages.items()))
