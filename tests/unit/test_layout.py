"""The layers: flows -> tasks -> titanflow -> titan_cfg, read from the source (ast), so a change that
climbs a layer or fattens a task fails here rather than in a review."""

import ast
import importlib
from pathlib import Path

import pytest

from titanflow.paths import REPO_ROOT
from titanflow.run.task_names import TaskName

PACKAGES = ("flows", "tasks", "titanflow", "titan_cfg")
#: The one module below tasks/ allowed to import flows/: the command line, the entry point above them.
ENTRY_POINTS = {"titanflow.cli"}
#: A task module is a decorator over one function below it, its docstring and imports: about this long.
TASK_MODULE_MAX_LINES = 60


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import sub` imports the module pkg.sub when there is one
            names |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                      for alias in node.names}
    return {n for n in names if n.split(".")[0] in PACKAGES}


def test_nothing_below_tasks_imports_tasks_or_flows():
    climbing = {name: sorted(i for i in _imports(path) if i.split(".")[0] in ("tasks", "flows"))
                for name, path in MODULES.items()
                if name.split(".")[0] in ("titanflow", "titan_cfg") and name not in ENTRY_POINTS}
    assert {name: found for name, found in climbing.items() if found} == {}


def test_titan_cfg_imports_nothing_of_titanflow():
    """The ranks import titan_cfg only: it must not pull the pipeline (Prefect, pandas) in."""
    found = {name: sorted(i for i in _imports(path) if i.startswith("titanflow"))
             for name, path in MODULES.items() if name.startswith("titan_cfg")}
    assert {name: f for name, f in found.items() if f} == {}


def test_module_level_imports_have_no_cycle():
    modules = MODULES
    graph = {name: {i for i in _imports(path, top_level_only=True) if i in modules} for name, path in modules.items()}
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for dep in graph[name]:
            if state.get(dep) == "open":
                pytest.fail(f"import cycle: {' -> '.join(trail[trail.index(dep):] + [dep])}")
            if dep not in state:
                visit(dep, [*trail, dep])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_task_modules_are_thin():
    lengths = {path.name: len(path.read_text().splitlines()) for path in (REPO_ROOT / "tasks").glob("*.py")}
    assert {name: n for name, n in lengths.items() if n > TASK_MODULE_MAX_LINES} == {}


def test_every_task_is_named_by_task_name_and_every_name_has_a_task():
    from prefect import Task

    tasks = [obj for path in (REPO_ROOT / "tasks").glob("*.py")
             for obj in vars(importlib.import_module(f"tasks.{path.stem}")).values() if isinstance(obj, Task)]
    assert sorted({t.name for t in tasks}) == sorted(TaskName)
