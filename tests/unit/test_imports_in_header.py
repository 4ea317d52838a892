"""Imports in the header: a project import inside a function body hides a module's dependencies from its header, so
each one moves to the header or says on its own line why it cannot, in one of two forms:

    from titanflow.launch.metrics import run_curve  # lazy: pandas
    from titan_cfg.kernels.rope import reference_rope  # order: make_importable_without_triton() first

``lazy: <packages>`` names the heavy third-party packages (:data:`HEAVY`, comma-separated, a note in brackets may
follow) that the imported module's header pulls in and the importing module's header does not; this file checks both
from the modules' own header imports, followed from module to module. ``order: <what runs first>`` names what must
run before the import. At most :data:`MAX_FUNCTION_IMPORTS` such imports outside the command line (titanflow/cli.py),
which imports each command's modules when the command runs.

A project import is one of flows, tasks, titanflow or titan_cfg (``titanflow.flows`` and ``titanflow.tasks`` as well,
whichever way flows/ and tasks/ are imported), or a relative one.
"""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from titanflow.paths import REPO_ROOT

#: The top-level packages whose imports count (the folders of the repository that hold them).
PROJECT = ("flows", "tasks", "titanflow", "titan_cfg")
#: Where function-level imports are the rule: each command imports what it runs.
CLI = ("titanflow/cli.py", "titanflow/cli/")
#: Function-level project imports allowed outside the command line, each with its reason.
MAX_FUNCTION_IMPORTS = 15
#: Packages heavy enough to keep out of a module's import (each takes from a few tenths of a second to seconds).
HEAVY = ("torch", "torchtitan", "transformers", "pandas", "prefect")
#: The reason on an import's line: ``# lazy: <packages>`` or ``# order: <what runs first>``.
REASON = re.compile(r"#\s*(lazy|order):\s*(\S.*)$")


@dataclass(frozen=True)
class FunctionImport:
    """One project import statement inside a function body."""

    path: str  # relative to the repository root, e.g. "titanflow/run/resume.py"
    line: int
    module: str  # the importing module's dotted name
    imported: tuple[str, ...]  # the project modules it imports (a package's submodules named in it included)
    text: str  # the statement's first line
    reason: tuple[str, str] | None  # ("lazy" | "order", the text after the colon); None: no reason given

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _is_project(name: str) -> bool:
    return name.split(".")[0] in PROJECT


def _sources(root: Path) -> list[Path]:
    """Every module file of the project folders, each once (titanflow/flows links to flows/: flows/'s path kept)."""
    found, seen = [], set()
    for path in sorted(p for package in PROJECT if (root / package).is_dir() for p in (root / package).rglob("*.py")
                       if "__pycache__" not in p.parts):
        if path.resolve() not in seen:
            seen.add(path.resolve())
            found.append(path)
    return found


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_of(root: Path, name: str) -> Path | None:
    """The file of module ``name`` under ``root`` (``titanflow.flows.x`` from flows/x.py when titanflow/ has no
    flows/), None for a name that is no project module (an attribute, say)."""
    parts = name.split(".")
    tails = [parts]
    if parts[0] == "titanflow" and len(parts) > 1 and parts[1] in ("flows", "tasks"):
        tails.append(parts[1:])
    for tail in tails:
        base = root.joinpath(*tail)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _imported(root: Path, node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Every module ``node`` imports, project and third-party (``from a import b``: ``a``, and ``a.b`` when ``b`` is a
    project submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module
    found = [base]
    if _is_project(base):
        found += [f"{base}.{alias.name}" for alias in node.names if source_of(root, f"{base}.{alias.name}")]
    return found


def _is_project_import(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or _is_project(node.module or "")
    return isinstance(node, ast.Import) and any(_is_project(alias.name) for alias in node.names)


def function_imports(root: Path) -> list[FunctionImport]:
    """The project imports inside function bodies (methods and nested functions included, each statement once) of
    every module under ``root``'s project folders, the command line's aside."""
    found = []
    for path in _sources(root):
        rel = path.relative_to(root).as_posix()
        if rel == CLI[0] or rel.startswith(CLI[1]):
            continue
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source, filename=rel)
        module, is_package = _module_name(root, path), path.name == "__init__.py"
        seen = set()
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not _is_project_import(node) or node.lineno in seen:
                    continue
                seen.add(node.lineno)
                statement = lines[node.lineno - 1:node.end_lineno]
                reason = next((m.groups() for m in map(REASON.search, statement) if m), None)
                imported = tuple(n for n in _imported(root, node, module, is_package) if _is_project(n))
                found.append(FunctionImport(rel, node.lineno, module, imported, statement[0].strip(), reason))
    return sorted(found, key=lambda f: (f.path, f.line))


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _is_main(test: ast.expr) -> bool:
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"


def header_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when ``path`` is imported: outside functions, ``if TYPE_CHECKING:`` and
    ``if __name__ == "__main__":``."""
    found, stack = [], list(ast.parse(path.read_text()).body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and (_is_type_checking(node.test) or _is_main(node.test)):
            stack.extend(node.orelse)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        else:
            stack.extend(ast.iter_child_nodes(node))
    return found


def _header_of(root: Path, path: Path, memo: dict) -> tuple[set[str], list[Path]]:
    """(the third-party top-level packages, the project files) that ``path``'s header imports (read once per
    ``memo``)."""
    if path not in memo:
        module, is_package = _module_name(root, path), path.name == "__init__.py"
        packages, files = set(), []
        for node in header_imports(path):
            for name in _imported(root, node, module, is_package):
                if _is_project(name):
                    files += _with_parents(root, name)
                else:
                    packages.add(name.split(".")[0])
        memo[path] = packages, files
    return memo[path]


def pulls(root: Path, names: tuple[str, ...], memo: dict | None = None) -> set[str]:
    """The third-party top-level packages that importing ``names`` pulls in through the project's own header imports
    (each module's packages' ``__init__`` included), followed from module to module. What a third-party package
    imports in turn is not followed."""
    memo = {} if memo is None else memo
    found: set[str] = set()
    todo = [p for name in names for p in _with_parents(root, name)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        packages, files = _header_of(root, path, memo)
        found |= packages
        todo += files
    return found


def _with_parents(root: Path, name: str) -> list[Path]:
    parts = name.split(".")
    return [p for i in range(1, len(parts) + 1) if (p := source_of(root, ".".join(parts[:i]))) is not None]


def untrue_reasons(root: Path, imports: list[FunctionImport]) -> list[str]:
    """Each ``lazy:`` reason that names a package outside :data:`HEAVY`, one the imported modules' headers do not
    pull in, or one the importing module's header pulls in already."""
    wrong, memo = [], {}
    for found in imports:
        if found.reason is None or found.reason[0] != "lazy":
            continue
        named = [p.strip() for p in found.reason[1].split("(")[0].split(",") if p.strip()]
        kept_out = pulls(root, found.imported, memo)
        already = pulls(root, (found.module,), memo)
        for package in named:
            if package not in HEAVY:
                wrong.append(f"{found.where()}: {package} is not one of the heavy packages {HEAVY}")
            elif package not in kept_out:
                wrong.append(f"{found.where()}: {', '.join(found.imported)} does not pull {package} in; "
                             "fix: move the import to the header")
            elif package in already:
                wrong.append(f"{found.where()}: {found.module} pulls {package} in already; "
                             "fix: move the import to the header")
    return wrong


def test_every_function_level_project_import_says_why_on_its_line():
    unmarked = [f.where() for f in function_imports(REPO_ROOT) if f.reason is None]
    assert not unmarked, ("project imports inside a function without a reason; move each to the module's header, or "
                          "end its line with '# lazy: <heavy package>' or '# order: <what runs first>':\n"
                          + "\n".join(unmarked))


def test_each_lazy_reason_is_true():
    wrong = untrue_reasons(REPO_ROOT, function_imports(REPO_ROOT))
    assert not wrong, "\n".join(wrong)


def test_at_most_15_function_level_project_imports_outside_the_command_line():
    imports = function_imports(REPO_ROOT)
    assert len(imports) <= MAX_FUNCTION_IMPORTS, (
        f"{len(imports)} function-level project imports, at most {MAX_FUNCTION_IMPORTS}:\n"
        + "\n".join(f.where() for f in imports))


@pytest.fixture
def tree_copy(tmp_path) -> Path:
    """The project's packages, copied: a place to plant imports."""
    for package in PROJECT:
        if (REPO_ROOT / package).is_dir():
            shutil.copytree(REPO_ROOT / package, tmp_path / package, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _plant(root: Path, rel: str, body: str) -> int:
    """Append a function whose body is ``body`` to ``root/rel``; returns the line of its first statement."""
    path = root / rel
    text = path.read_text().rstrip("\n") + "\n\n\ndef _planted():\n"
    path.write_text(text + f"    {body}\n")
    return text.count("\n") + 1


def test_a_planted_import_without_a_reason_is_named_with_its_line(tree_copy):
    before = function_imports(tree_copy)
    line = _plant(tree_copy, "titanflow/params.py", "from titanflow.paths import REPO_ROOT")
    marked = _plant(tree_copy, "titanflow/refusal.py", "from titanflow.paths import REPO_ROOT  # order: planted")
    _plant(tree_copy, "titanflow/cli.py", "from titanflow.paths import REPO_ROOT")  # the command line: not counted
    planted = [f for f in function_imports(tree_copy) if f not in before]
    assert [f.where() for f in planted if f.reason is None] == [
        f"titanflow/params.py:{line}: from titanflow.paths import REPO_ROOT"]
    assert [(f.path, f.line, f.reason) for f in planted if f.reason] == [
        ("titanflow/refusal.py", marked, ("order", "planted"))]


def test_a_planted_lazy_reason_that_is_not_true_is_named(tree_copy):
    (tree_copy / "titanflow" / "_planted_heavy.py").write_text("import pandas\n\nX = 1\n")
    (tree_copy / "titanflow" / "_planted_via.py").write_text("from titanflow import _planted_heavy\n\nY = 1\n")
    (tree_copy / "titanflow" / "_planted_already.py").write_text("import pandas.api\n")
    light = _plant(tree_copy, "titanflow/params.py", "from titanflow.paths import REPO_ROOT  # lazy: pandas")
    not_heavy = _plant(tree_copy, "titanflow/refusal.py", "from titanflow._planted_heavy import X  # lazy: pathlib")
    already = _plant(tree_copy, "titanflow/_planted_already.py", "from titanflow._planted_heavy import X  # lazy: pandas")
    # true: the imported module's header imports pandas, or imports a module whose header does
    _plant(tree_copy, "titanflow/paths.py", "from titanflow._planted_heavy import X  # lazy: pandas")
    _plant(tree_copy, "titanflow/task_names.py",
           "from titanflow._planted_via import Y  # lazy: pandas (via titanflow._planted_heavy)")
    planted = {"titanflow/params.py", "titanflow/refusal.py", "titanflow/_planted_already.py", "titanflow/paths.py",
               "titanflow/task_names.py"}
    wrong = [w for w in untrue_reasons(tree_copy, function_imports(tree_copy)) if w.split(":")[0] in planted]
    assert wrong == [  # the true ones (paths.py, task_names.py) are not named
        f"titanflow/_planted_already.py:{already}: from titanflow._planted_heavy import X  # lazy: pandas: "
        "titanflow._planted_already pulls pandas in already; fix: move the import to the header",
        f"titanflow/params.py:{light}: from titanflow.paths import REPO_ROOT  # lazy: pandas: titanflow.paths does not "
        "pull pandas in; fix: move the import to the header",
        f"titanflow/refusal.py:{not_heavy}: from titanflow._planted_heavy import X  # lazy: pathlib: pathlib is not one "
        f"of the heavy packages {HEAVY}",
    ]
