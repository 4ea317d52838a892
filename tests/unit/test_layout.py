"""The floors: flows -> tasks -> titanflow -> titan_cfg, and inside titanflow/ the floors listed in pyproject.toml's
[tool.importlinter] (README "Layout"), checked by import-linter over every import statement, those inside a function
included, so a change that climbs a floor, joins two leaves (assets, export, weights), brings Prefect into the record
or its judge, or closes a circle fails here with the two modules named. A task module is kept thin."""

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from titanflow.paths import REPO_ROOT
from titanflow.task_names import TaskName

#: import-linter's command, installed beside this Python by the `test` extra.
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
#: The packages the contracts cover (pyproject.toml's root_packages).
PACKAGES = ("flows", "tasks", "titanflow", "titan_cfg")
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
    """The packages and pyproject.toml, copied: a place to plant an import the contracts must refuse."""
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
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
             for obj in vars(importlib.import_module(f"tasks.{path.stem}")).values() if isinstance(obj, Task)]
    assert sorted({t.name for t in tasks}) == sorted(TaskName)
