"""The manual and its front door: docs/ builds as a site (mkdocs, material theme, strict), every page is in the
site's nav, one link away from the README and listed on the home page, the README stays short, and what the manual
says about the tree (docs/layout.md's tree block, the README's floors table and "Where to change what") is the tree.

The tree block's format (docs/layout.md, "The tree"): a fenced ``text`` block; a line that starts in the first
column names a path from the repository root (a folder ends with ``/``), then, after two spaces or more, free text;
the indented lines under a folder name its members, relative to it, separated by commas or ``+``, each optionally
followed by a description in parentheses (which may span lines and is not read).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"
#: The page whose tree block names every module.
LAYOUT = DOCS / "layout.md"
#: The manual's home page, which lists every page of the nav.
INDEX = DOCS / "index.md"
#: The packages whose every module the tree block names.
PACKAGES = ("flows", "tasks", "titanflow", "titan_cfg")
#: The README's most lines: a front door, the rest is the manual.
README_MAX_LINES = 300
#: A path in prose: folders ending with ``/``, or a file with one of these suffixes (``*`` globbed).
PROSE_PATH = re.compile(r"(?<![\w./<$-])((?:[\w.-]+/)+(?:[\w*.-]+\.(?:py|toml|yaml|csv|json|txt|md|sh))?)(?![\w/<-])")


def section(path: Path, title: str) -> str:
    """The ``## title`` section of the markdown file ``path``, up to the next ``## `` heading."""
    text = path.read_text()
    assert f"\n## {title}\n" in text, f'{path.relative_to(ROOT)} has no "## {title}" section'
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def readme_section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    return section(README, title)


def docs_pages() -> set[str]:
    """Every page of the manual, relative to docs/."""
    return {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}


def nav_pages(node) -> set[str]:
    """The pages mkdocs.yml's nav lists (nested sections walked)."""
    if isinstance(node, str):
        return {node} if node.endswith(".md") else set()
    if isinstance(node, dict):
        return set().union(*(nav_pages(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(nav_pages(item) for item in node))
    return set()


def headings(markdown: str) -> list[str]:
    """The headings of a markdown text, fenced code skipped."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6} (.+?)\s*$", line)):
            found.append(match.group(1))
    return found


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def layout_block() -> str:
    """The fenced ``text`` block of docs/layout.md's "The tree" section."""
    match = re.search(r"^```text\n(.*?)^```", section(LAYOUT, "The tree"), re.DOTALL | re.MULTILINE)
    assert match, 'docs/layout.md "The tree" has no ```text block'
    return match.group(1)


def parse_layout(block: str) -> tuple[set[str], list[str]]:
    """(every path the block names, from the repository root; the words of member lines that are not names)."""
    named: set[str] = set()
    members: dict[str, list[str]] = {}
    folder = None
    for line in block.splitlines():
        if not line.strip():
            continue
        if line[0].isspace():
            members.setdefault(folder or "<no folder>", []).append(line)
            continue
        path = line.split()[0]
        named.add(path)
        folder = path if path.endswith("/") else None
    stray = []
    for parent, lines in members.items():
        text = "\n".join(lines)
        while re.search(r"\([^()]*\)", text):
            text = re.sub(r"\([^()]*\)", " ", text)
        for word in re.split(r"[\s,+]+", text):
            if not word:
                continue
            if parent == "<no folder>" or not re.fullmatch(r"[\w.-]+/?", word):
                stray.append(f"{parent}: {word!r}")
            else:
                named.add(parent + word)
    return named, stray


def holds_code(init: Path) -> bool:
    """An ``__init__.py`` with more than a docstring."""
    body = ast.parse(init.read_text()).body
    return any(not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body)


def modules_and_packages() -> set[str]:
    """Every module (``__init__.py`` only when it holds code) and package folder of PACKAGES, from the root."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            if path.name == "__init__.py":
                found.add(path.parent.relative_to(ROOT).as_posix() + "/")
                if not holds_code(path):
                    continue
            found.add(path.relative_to(ROOT).as_posix())
    return found


def exists(path: str) -> bool:
    """``path`` (from the repository root; ``/`` at the end: a folder; ``*``: a glob) is in the tree."""
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).is_dir() if path.endswith("/") else (ROOT / path).exists()


def test_the_manual_builds_in_strict_mode(tmp_path):
    """``mkdocs build --strict`` passes: no broken link or anchor between pages, no page left out of the nav
    (mkdocs.yml's ``validation`` makes those warnings, and strict mode fails on a warning)."""
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr}\n{proc.stdout}"


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    """No orphan page: mkdocs alone only reports a page missing from the nav, so the nav is compared with docs/ here
    (mkdocs.yml is plain YAML, read with ``yaml.safe_load``)."""
    config = yaml.safe_load(MKDOCS_YML.read_text())
    assert config["docs_dir"] == "docs" and config["theme"]["name"] == "material"
    listed, pages = nav_pages(config["nav"]), docs_pages()
    assert pages - listed == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"
    assert listed - pages == set(), f"nav entries with no page under docs/: {sorted(listed - pages)}"


def test_the_readme_is_a_front_door():
    """The README stays at most 300 lines; everything longer belongs in a docs page."""
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


def test_the_home_page_lists_every_page_of_the_nav():
    """docs/index.md, the site's home page, links every other page of the nav, so its list of the manual cannot fall
    behind a page added to mkdocs.yml."""
    listed = nav_pages(yaml.safe_load(MKDOCS_YML.read_text())["nav"]) - {"index.md"}
    linked = set(re.findall(r"\]\(([^)#\s]+\.md)", INDEX.read_text()))
    assert sorted(listed - linked) == [], "nav pages docs/index.md does not link"


def test_every_docs_page_is_one_link_away_from_the_readme():
    """Each page of the manual is linked from the README (its "Manual" list at least)."""
    link = re.compile(r"\]\(docs/([^)#\s]+\.md)")
    pages, linked = docs_pages(), set(link.findall(README.read_text()))
    manual = set(link.findall(readme_section("Manual")))
    assert sorted(pages - linked) == [], "docs pages the README never links"
    assert sorted(pages - manual) == [], "docs pages missing from the README's Manual list"


def test_every_relative_link_of_the_readme_resolves():
    """A README link to a file of the repository finds it, and its anchor, if any, is a heading of that file (as GitHub
    names headings), so a section moved between pages cannot leave a dead link behind."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        if not file.exists():
            broken.append(f"{target}: no {path}")
        elif anchor and file.suffix == ".md" and anchor not in {github_anchor(h) for h in headings(file.read_text())}:
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert broken == [], "README links that lead nowhere:\n" + "\n".join(broken)


def test_the_layout_block_is_the_tree():
    """docs/layout.md's tree block names every module and package of flows/, tasks/, titanflow/ and titan_cfg/ (an
    ``__init__.py`` when it holds code), and nothing that is not in the tree."""
    named, stray = parse_layout(layout_block())
    required = modules_and_packages()
    missing = sorted(required - named)
    absent = sorted(path for path in named if not exists(path))
    assert (missing, absent, stray) == ([], [], []), (
        "docs/layout.md's tree block and the tree differ:\n"
        f"  in the tree, not in the block: {missing}\n"
        f"  in the block, not in the tree: {absent}\n"
        f"  words of member lines that are not names (describe them in parentheses): {stray}")


def test_the_layout_floors_are_the_import_linter_contract():
    """The floors table of the README's Layout section lists titanflow/'s floors in the order pyproject.toml's
    import-linter contract enforces them."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    enforced = next(contract["layers"] for contract in contracts if contract.get("containers") == ["titanflow"])
    rows = [line for line in readme_section("Layout").splitlines() if line.startswith("| `")]
    listed = [re.split(r"(?<!\\)\|", row)[1].replace("\\|", "|").replace("`", "").strip() for row in rows]
    assert listed == enforced


def test_where_to_change_what_names_only_paths_that_exist():
    """Every file or folder the README's "Where to change what" names is in the tree."""
    named = set(PROSE_PATH.findall(readme_section("Where to change what")))
    assert named, 'no path found in README "Where to change what"'
    assert sorted(path for path in named if not exists(path)) == []


#: The record a new scenario, target or install profile is written in: the "Where to change what" row -> its file.
RECORDS = {"add a scenario": "titan_cfg/scenarios.py", "add a target": "titan_cfg/targets.py",
           "add an install profile": "titan_cfg/profiles.py"}
#: Where the Python files that could list scenarios or targets by hand live.
PYTHON_TREES = (*PACKAGES, "tests", "benchmarks")


def where_to_change(task: str) -> str:
    """The README's "Where to change what" row whose first cell is ``task``."""
    rows = [line for line in readme_section("Where to change what").splitlines() if line.startswith(f"| {task} |")]
    assert len(rows) == 1, f'README "Where to change what" has no row "{task}"'
    return rows[0]


def table_keys(markdown: str, title: str) -> set[str]:
    """The first cells (a backticked name each) of the table in ``markdown``'s ``## title`` section."""
    section = markdown.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return {match.group(1) for match in re.finditer(r"^\| `([^`]+)` \|", section, re.MULTILINE)}


def lists_by_hand(names: set[str]) -> list[str]:
    """``path:line`` of each list, tuple, set or dict literal of the Python trees whose strings include every one of
    ``names``: a registry written out again, which a new entry would have to be added to."""
    found = []
    for path in sorted(p for tree in PYTHON_TREES for p in (ROOT / tree).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                if names <= {item.value for item in items if isinstance(item, ast.Constant)}:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_where_to_change_what_names_every_file_a_new_scenario_target_or_profile_takes():
    """Adding a scenario, a target or an install profile is one record, its rows in the documentation tables and
    `make goldens` (deployments/prefect.yaml written whole from the registries, the goldens): each row names its
    record's file, the scenario and target rows the tables and the deployments file; the tables list exactly the
    registry; and no other Python file lists every scenario or every target by hand (tests, benchmarks and the
    deployments take them from the registries), so nothing else is to be edited."""
    from titan_cfg.scenarios import SCENARIOS
    from titan_cfg.targets import TARGETS

    for task, record in RECORDS.items():
        assert record in PROSE_PATH.findall(where_to_change(task)), task
    for task in ("add a scenario", "add a target"):
        row = where_to_change(task)
        assert {"docs/scenarios-and-targets.md", "deployments/prefect.yaml"} <= set(PROSE_PATH.findall(row)), task
        assert "this README" in row and "`make goldens` writes the rest" in row, task
    manual = (DOCS / "scenarios-and-targets.md").read_text()
    for registry, title in ((SCENARIOS, "Scenarios"), (TARGETS, "Targets")):
        assert table_keys(README.read_text(), title) == set(registry), f"README {title}"
        assert table_keys(manual, title) == set(registry), f"docs/scenarios-and-targets.md {title}"
    # the registry itself is the one literal that names every entry
    assert [found.split(":")[0] for found in lists_by_hand(set(SCENARIOS))] == [RECORDS["add a scenario"]]
    assert [found.split(":")[0] for found in lists_by_hand(set(TARGETS))] == [RECORDS["add a target"]]
