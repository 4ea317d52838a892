"""titan_cfg.upstream: every private torch and torchtitan name the project uses goes through it, each resolves in this
install, and one that does not is told with the versions it was written against (and by titanflow doctor)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from titan_cfg import upstream
from titanflow.paths import REPO_ROOT

#: The packages whose private names only titan_cfg/upstream.py may name.
UPSTREAM = ("torch", "torchtitan")


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


def test_every_private_name_resolves_in_this_install_as_doctor_finds_them():
    """In a Python of its own, after the cpu target's compatibility layers (torchtitan needs them on CPU)."""
    from titanflow.run.doctor import check_upstream

    check = check_upstream("cpu")
    assert (check.name, check.ok) == ("upstream names", True), check.detail
    assert check.detail == f"all {len(upstream.PRIVATE_NAMES)} private torch and torchtitan names resolve"


def test_a_name_this_install_lacks_is_told_with_the_versions_it_was_written_against(monkeypatch):
    monkeypatch.setattr(upstream, "PRIVATE_NAMES", (("json", "_default_decoder"), ("json", "_gone")))
    assert upstream.missing() == {"json._gone": "module 'json' has no attribute '_gone'"}
    with pytest.raises(ImportError, match=r"json._gone, a private name titanflow uses, is not in this install "
                                          r".*written against torch 2.13.0, torchtitan 0.3.0"):
        upstream.private("json", "_gone")
    with pytest.raises(KeyError, match="not among titan_cfg.upstream.PRIVATE_NAMES"):
        upstream.private("torch", "_not_listed")
