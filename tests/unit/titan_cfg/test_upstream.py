"""titan_cfg.upstream: every name the project takes from torchtitan, torch_neuronx, nki and nkilib is in its list (parsed
from the code), every private torch and torchtitan name goes through it, each resolves in this install, and one that
does not is told with the module it was looked for in (and by titanflow doctor)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from titan_cfg import upstream
from titanflow.paths import REPO_ROOT

#: The packages whose private names only titan_cfg/upstream.py may name.
UPSTREAM = ("torch", "torchtitan")
#: The packages every name taken from must be in titan_cfg.upstream's list.
LISTED = ("torchtitan", "torch_neuronx", "nki", "nkilib")
#: The folders of rank code, renders, tasks and flows whose imports the list covers.
SCANNED = ("titan_cfg", "titanflow", "tasks", "flows")


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def private_uses(path: Path) -> list[str]:
    """Private torch/torchtitan names ``path`` imports or reaches as ``torch._x``: ``line: name`` each."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in UPSTREAM:
            found += [f"{node.lineno}: {node.module}.{alias.name}" for alias in node.names
                      if _private(alias.name) or any(map(_private, node.module.split(".")))]
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: {alias.name}" for alias in node.names
                      if alias.name.split(".")[0] in UPSTREAM and any(map(_private, alias.name.split(".")))]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in UPSTREAM:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_but_the_adapter_names_a_private_torch_or_torchtitan_name():
    files = [f for folder in ("titan_cfg", "titanflow", "tasks", "flows", "benchmarks")
             for f in (REPO_ROOT / folder).rglob("*.py") if f != REPO_ROOT / "titan_cfg" / "upstream.py"]
    offending = {str(f.relative_to(REPO_ROOT)): uses for f in files if (uses := private_uses(f))}
    assert offending == {}, "route these through titan_cfg/upstream.py"


def test_the_scan_sees_each_way_of_naming_one(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import torch\nfrom torchtitan.models.qwen3 import _qwen3_norm, model_registry\n"
                       "import torch._utils\nfrom torch.distributed import _x as y\n"
                       "torch._utils._get_available_device_type()\ntorch.nn.functional.relu\n")
    assert private_uses(planted) == ["2: torchtitan.models.qwen3._qwen3_norm", "3: torch._utils",
                                     "4: torch.distributed._x", "5: torch._utils._get_available_device_type",
                                     "5: torch._utils"]


class _Taken(ast.NodeVisitor):
    """The (module, name) pairs one file takes from the :data:`LISTED` packages, with their lines (see
    titan_cfg/upstream.py's docstring for what counts), and the ``private("module", "name")`` calls of the adapter."""

    def __init__(self):
        self.scopes: list[dict[str, tuple[str, str | None]]] = [{}]  # bound name -> (module, name in it or None)
        self.modules: set[str] = set()  # modules bound by a plain `import a.b.c`: a.b.c.x walks through them
        self.found: list[tuple[int, str, str | None]] = []

    def _bound(self, name: str):
        return next((scope[name] for scope in reversed(self.scopes) if name in scope), None)

    def _scope(self, node):
        self.scopes.append({})
        self.generic_visit(node)
        self.scopes.pop()

    def visit_FunctionDef(self, node):
        for annotation in [node.returns, *(a.annotation for a in ast.walk(node.args) if isinstance(a, ast.arg))]:
            self._string_annotation(annotation)
        self._scope(node)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = _scope

    def visit_AnnAssign(self, node):
        self._string_annotation(node.annotation)
        self.generic_visit(node)

    def _string_annotation(self, annotation):
        """An annotation written as a string (``"Trainer.Config"``) names what it would name unquoted."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            expression = ast.parse(annotation.value, mode="eval").body
            for sub in ast.walk(expression):
                sub.lineno = annotation.lineno
            self.visit(expression)

    def visit_Import(self, node):
        for alias in node.names:
            if alias.name.split(".")[0] in LISTED:
                self.found.append((node.lineno, alias.name, None))
                if alias.asname:
                    self.scopes[-1][alias.asname] = (alias.name, None)
                else:
                    parts = alias.name.split(".")
                    self.scopes[-1][parts[0]] = (parts[0], None)
                    self.modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module and node.module.split(".")[0] in LISTED:
            for alias in node.names:
                self.found.append((node.lineno, node.module, alias.name))
                self.scopes[-1][alias.asname or alias.name] = (node.module, alias.name)

    def visit_Attribute(self, node):
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        bound = self._bound(base.id) if isinstance(base, ast.Name) else None
        if bound is None:
            self.generic_visit(node)
            return
        module, name = bound
        if name is not None:  # an attribute of a name imported from the module
            self.found.append((node.lineno, module, f"{name}.{chain[0]}"))
            return
        while chain and f"{module}.{chain[0]}" in self.modules:
            module = f"{module}.{chain.pop(0)}"
        if chain:
            self.found.append((node.lineno, module, chain[0]))

    def visit_Call(self, node):
        if (isinstance(node.func, ast.Name) and node.func.id == "private" and len(node.args) == 2
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)):
            self.found.append((node.lineno, node.args[0].value, node.args[1].value))
        self.generic_visit(node)


def taken(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of each name ``path`` takes from the :data:`LISTED` packages (name None: ``import M``),
    and of each ``private(module, name)`` call."""
    visitor = _Taken()
    visitor.visit(ast.parse(path.read_text(), str(path)))
    return visitor.found


def scanned_files() -> list[Path]:
    return sorted(f for folder in SCANNED for f in (REPO_ROOT / folder).rglob("*.py"))


def test_every_name_the_code_takes_is_in_the_list_and_every_listed_name_is_taken():
    """A new import from torchtitan, torch_neuronx, nki or nkilib fails here, with its file:line, until the list
    (titan_cfg/upstream.py) has it, so titanflow doctor resolves it on the node; a name no code takes any more fails
    as stale. ``import M`` alone needs the module in the list (with or without names: the check imports it)."""
    listed = {(n.module, n.name) for n in upstream.NAMES}
    modules = {n.module for n in upstream.NAMES}
    uses: dict[tuple[str, str | None], list[str]] = {}
    for path in scanned_files():
        for line, module, name in taken(path):
            uses.setdefault((module, name), []).append(f"{path.relative_to(REPO_ROOT)}:{line}")
    unlisted = [f"{where}: {module}{'.' + name if name else ''}" for (module, name), wheres in sorted(
        uses.items(), key=str) if ((module, name) not in listed if name else module not in modules) for where in wheres]
    assert unlisted == [], "add these to titan_cfg/upstream.py (TORCHTITAN, NEURON or TORCH)"
    modules_taken = {module for module, _ in uses}
    stale = [n.dotted for n in upstream.NAMES if ((n.module, n.name) not in uses if n.name else
                                                 n.module not in modules_taken)]
    assert stale == [], "no code takes these any more: drop them from titan_cfg/upstream.py"


def test_the_list_scan_sees_each_way_of_taking_a_name(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from torchtitan.trainer import Trainer\n"          # 3
        "import torchtitan.tools.utils as tt_utils\n"                                 # 4
        "import torchtitan.trainer\n"                                                 # 5
        "from nkilib.core.embeddings.rope_hf import rope_hf as kernel\n"             # 6
        "import json\n"
        "def f(config: 'Trainer.Config'):\n"                                          # 8
        "    from torchtitan.models.common import decoder\n"                         # 9
        "    decoder.create_attention_mask = None\n"                                  # 10
        "    tt_utils.device_type = 'cpu'\n"                                          # 11
        "    torchtitan.trainer.logger.addFilter(None)\n"                             # 12
        "    json.dumps(private('torch._utils', '_get_available_device_type'))\n"   # 13
        "    return Trainer.train, kernel.__name__\n")                                # 14
    assert taken(planted) == [
        (3, "torchtitan.trainer", "Trainer"), (4, "torchtitan.tools.utils", None), (5, "torchtitan.trainer", None),
        (6, "nkilib.core.embeddings.rope_hf", "rope_hf"), (8, "torchtitan.trainer", "Trainer.Config"),
        (9, "torchtitan.models.common", "decoder"), (10, "torchtitan.models.common", "decoder.create_attention_mask"),
        (11, "torchtitan.tools.utils", "device_type"), (12, "torchtitan.trainer", "logger"),
        (13, "torch._utils", "_get_available_device_type"), (14, "torchtitan.trainer", "Trainer.train"),
        (14, "nkilib.core.embeddings.rope_hf", "rope_hf.__name__")]


def test_every_private_name_has_its_reason_in_the_table():
    table = upstream.__doc__.split("| name | used for |")[1]
    assert [n.dotted for n in upstream.NAMES if n.private and f"``{n.name}``" not in table
            and f"``{n.dotted}``" not in table] == []


def test_every_cpu_name_resolves_in_this_install_as_doctor_finds_them():
    """In a Python of its own, after the cpu target's compatibility layers (torchtitan needs them on CPU): every
    torchtitan and private torch name resolves; the Neuron ones are not asked for."""
    from titanflow.run.checks import check_upstream

    check = check_upstream("cpu")
    assert (check.name, check.ok) == ("upstream names", True), check.detail
    cpu = upstream.names_for("cpu")
    # every name but the Neuron ones and those of an adapted change's forms (the window's check covers them)
    assert len(cpu) == len(upstream.NAMES) - sum(map(len, upstream.NEURON.values())) - len(upstream.FORMS)
    assert check.detail.startswith(f"all {len(cpu)} names every scenario takes from torch, torchtitan resolve "
                                   "(torchtitan 0.3.0 resembles upstream between 2026-08-18 (has partial_dtensor) and "
                                   "2026-08-19 (lacks grain); titanflow adapts to it: with sdpa_refused (2026-06-09, #3571); in "), check.detail


def test_the_neuron_names_are_asked_for_on_neuron_targets_only():
    neuron = {n.dotted for n in upstream.NAMES if n.device == "neuron"}
    assert neuron == {"torch_neuronx.nki_op", "torch_neuronx.wrap_nki", "nkilib.core.embeddings.rope_hf.rope_hf"}
    assert neuron <= {n.dotted for n in upstream.names_for("neuron")}
    assert not neuron & {n.dotted for d in ("cpu", "cuda") for n in upstream.names_for(d)}


def test_a_missing_name_is_told_with_the_module_it_was_looked_for_in(monkeypatch):
    names = (upstream.Name("json", "JSONDecoder.decode"), upstream.Name("json", "_gone"),
             upstream.Name("json", "JSONDecoder.gone"), upstream.Name("json.nowhere", "x"),
             upstream.Name("json.nowhere", "y"), upstream.Name("json", "nowhere.z"),
             upstream.Name("no_such_package.sub", None))
    assert upstream.missing("cpu", names) == {
        "json._gone": "module json has no name _gone", "json.JSONDecoder.gone": "json.JSONDecoder has no name gone",
        "json.nowhere": "no module", "no_such_package": "no module"}
    monkeypatch.setattr(upstream, "PRIVATE_NAMES", (("json", "_default_decoder"), ("json", "_gone")))
    with pytest.raises(ImportError, match=r"json._gone, a private name titanflow uses, is not in this install "
                                          r"\(json._gone: module json has no name _gone\); it was written against "
                                          r"torch 2.13.0, torchtitan 0.3.0"):
        upstream.private("json", "_gone")
    with pytest.raises(KeyError, match="not among titan_cfg.upstream.PRIVATE_NAMES"):
        upstream.private("torch", "_not_listed")


def test_a_module_that_fails_to_import_is_told_with_its_error(tmp_path, monkeypatch):
    (tmp_path / "broken_fork").mkdir()
    (tmp_path / "broken_fork" / "__init__.py").write_text("")
    (tmp_path / "broken_fork" / "trainer.py").write_text("import missing_dependency_of_the_fork\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert upstream.missing("cpu", (upstream.Name("broken_fork.trainer", "Trainer"),)) == {
        "broken_fork.trainer": "does not import (ModuleNotFoundError: No module named 'missing_dependency_of_the_fork')"}
