"""The floors: titanflow -> titan_cfg, and inside titanflow/ (its flows and tasks on top, read from the folders
flows/ and tasks/ through titanflow/flows and titanflow/tasks) the floors listed in pyproject.toml's
[tool.importlinter] (README "Layout", docs/layout.md), checked by import-linter over every import statement, those
inside a function included, so a change that climbs a floor, joins two leaves (assets, export, weights), brings
Prefect into the rank side, the record or its judge, or closes a circle fails here with the two modules named. A task
module is kept thin. What the package installs carries titanflow's own names only: a wheel built from the project
holds the packages titanflow and titan_cfg, no top-level flows or tasks."""

import ast
import importlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from titanflow.paths import REPO_ROOT
from titanflow.task_names import TaskName

#: import-linter's command, installed beside this Python by the `test` extra.
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: The packages the contracts cover (pyproject.toml's root_packages), and what the wheel installs.
PACKAGES = ("titanflow", "titan_cfg")
#: The folders of the packages' code: flows/ and tasks/ are titanflow.flows and titanflow.tasks (the links
#: titanflow/flows and titanflow/tasks).
FOLDERS = ("flows", "tasks", *PACKAGES)
#: The folders whose Python files import the project: the packages', the tests' and the benchmarks'.
IMPORTING_FOLDERS = (*FOLDERS, "tests", "benchmarks")
#: A task module is a decorator over one function below it, its docstring and imports: about this long.
TASK_MODULE_MAX_LINES = 60


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts of ``root``'s pyproject.toml over ``root``'s packages (no cache: the tree is read
    afresh)."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(root / "pyproject.toml")],
                          cwd=root, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=300)


def test_every_contract_is_kept():
    result = lint_imports(REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 5 kept, 0 broken." in result.stdout


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    """The packages' folders (the links titanflow/flows and titanflow/tasks kept as links), pyproject.toml and the
    README (the wheel's long description), copied: a place to plant an import the contracts must refuse, or to build
    the wheel from."""
    root = tmp_path_factory.mktemp("tree")
    for folder in FOLDERS:
        shutil.copytree(REPO_ROOT / folder, root / folder, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, root / name)
    return root


@pytest.mark.parametrize("module, planted, named", [
    # a function-level import one floor up: the vocabulary reaching for the run's checks
    ("titanflow/params.py", "from titanflow.run.preflight import preflight",
     ["titanflow.params is not allowed to import titanflow.run", "titanflow.params -> titanflow.run.preflight"]),
    # the rank side reaching into the pipeline
    ("titan_cfg/job.py", "from titanflow.paths import REPO_ROOT",
     ["titan_cfg is not allowed to import titanflow", "titan_cfg.job -> titanflow.paths"]),
    # a circle between two modules of one floor: torchrun imports resume
    ("titanflow/launch/resume.py", "from titanflow.launch.torchrun import run_training",
     ["No cycles are allowed in titanflow.launch", ".torchrun -> .resume"]),
    # a task (a file of tasks/, read as titanflow.tasks) reaching up for a flow
    ("tasks/report.py", "from titanflow.flows.scenario import qwen3_scenario",
     ["titanflow.tasks is not allowed to import titanflow.flows", "titanflow.tasks.report -> titanflow.flows.scenario"]),
    # Prefect in the judge: reading a run record would start loading Prefect again
    ("titanflow/judge/verdict.py", "import prefect",
     ["titanflow.judge is not allowed to import prefect", "titanflow.judge.verdict -> prefect"]),
    # one leaf reaching into another: the export naming the run's weights
    ("titanflow/export/assemble.py", "from titanflow.weights.identity import weights_id",
     ["titanflow.export is not allowed to import titanflow.weights",
      "titanflow.export.assemble -> titanflow.weights.identity"]),
])
def test_a_planted_import_inside_a_function_breaks_a_contract_naming_both_modules(tree_copy, module, planted, named):
    path = tree_copy / module
    original = path.read_text()
    path.write_text(original + f"\n\ndef _planted():\n    {planted}\n")
    try:
        result = lint_imports(tree_copy)
    finally:
        path.write_text(original)
    assert result.returncode == 1 and "BROKEN" in result.stdout, result.stdout
    assert [line for line in named if line not in result.stdout] == [], result.stdout


@pytest.mark.parametrize("module, absent", [
    ("titanflow.results", ("prefect", "pandas", "torch")),
    ("titanflow.record.summary", ("prefect", "pandas", "torch")),
    ("titanflow.record.comparison", ("prefect", "torch")),
    ("titanflow.judge.verdict", ("prefect", "pandas", "torch")),
    ("titanflow.judge.trends", ("prefect", "torch")),
])
def test_the_record_and_its_judge_load_no_prefect(module, absent):
    """What importing ``module`` loads, in a fresh interpreter: the contracts see imports, this sees modules."""
    loaded = subprocess.run([sys.executable, "-c", f"import sys, {module}; print(' '.join(sys.modules))"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert sorted(name for name in absent if name in loaded) == []


def test_task_modules_are_thin():
    lengths = {path.name: len(path.read_text().splitlines()) for path in (REPO_ROOT / "tasks").glob("*.py")}
    assert {name: n for name, n in lengths.items() if n > TASK_MODULE_MAX_LINES} == {}


def test_every_task_is_named_by_task_name_and_every_name_has_a_task():
    from prefect import Task

    tasks = [obj for path in (REPO_ROOT / "tasks").glob("*.py")
             for obj in vars(importlib.import_module(f"titanflow.tasks.{path.stem}")).values() if isinstance(obj, Task)]
    assert sorted({t.name for t in tasks}) == sorted(TaskName)


def test_flows_and_tasks_are_read_under_titanflow_through_links_to_their_folders():
    for name in ("flows", "tasks"):
        link = REPO_ROOT / "titanflow" / name
        assert link.is_symlink() and link.readlink() == Path("..", name), link
        assert importlib.import_module(f"titanflow.{name}").__file__ == str(link / "__init__.py")


def _top_level_imports(path: Path) -> set[str]:
    """The first component of every absolute module ``path`` imports, function-level imports included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_imports_flows_or_tasks_by_a_top_level_name():
    """From the repository root ``import flows`` would still find the folder, and load a second copy of each flow;
    installed there is no such package."""
    found = {str(path.relative_to(REPO_ROOT)): hits for folder in IMPORTING_FOLDERS
             for path in sorted((REPO_ROOT / folder).rglob("*.py"))
             if (hits := _top_level_imports(path) & {"flows", "tasks"})}
    assert found == {}


def test_the_wheel_installs_titanflow_and_titan_cfg_and_no_top_level_flows_or_tasks(tree_copy, tmp_path):
    """pip builds the wheel from the project (this environment's setuptools, no index: about 3 s). Its top-level
    names, its RECORD and top_level.txt: titanflow (flows and tasks inside it) and titan_cfg; and every data file the
    packages read beside their modules (the regression rules, the published figures, the retention policy)."""
    pytest.importorskip("setuptools")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--no-index", "--disable-pip-version-check", "--wheel-dir", str(tmp_path), str(tree_copy)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (wheel,) = tmp_path.glob("titanflow-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (info,) = {name.split("/")[0] for name in names if name.split("/")[0].endswith(".dist-info")}
        record = {line.split(",")[0] for line in archive.read(f"{info}/RECORD").decode().splitlines()}
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
    assert {name.split("/")[0] for name in names} - {info} == set(PACKAGES)
    assert sorted(top_level) == sorted(PACKAGES) and record == set(names)
    data = {p.relative_to(REPO_ROOT).as_posix() for package in ("titanflow", "titan_cfg")
            for p in (REPO_ROOT / package).rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")}
    assert data == {"titanflow/judge/regression_rules.toml", "titan_cfg/published_expectations.toml",
                    "titanflow/record/retention.toml"}
    assert data <= set(names)
    for folder in ("flows", "tasks"):
        files = {p.relative_to(REPO_ROOT / folder).as_posix() for p in (REPO_ROOT / folder).glob("*.py")}
        assert {n.removeprefix(f"titanflow/{folder}/") for n in names if n.startswith(f"titanflow/{folder}/")} == files
