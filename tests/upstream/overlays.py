"""The torchtitan snapshots of the window (titan_cfg.window), each installed beside the cpu venv as an overlay: a folder
that, first on ``PYTHONPATH``, replaces the venv's torchtitan 0.3.0 and adds what the snapshot requires that the venv
lacks, while everything else stays the venv's (as the transformers 5.16 overlay of ``make overlay-trn2`` does).

The archives are source snapshots of upstream pytorch/torchtitan (``torchtitan-<date>-<commit>.tar.gz``), found in
``$TITANFLOW_UPSTREAM_SNAPSHOTS`` or, by default, ``../shared/upstream/torchtitan`` beside the checkout. Each is
installed once per content key (the archive's sha256 and this Python's version) into
``.venv/overlays/torchtitan-<date>-<key>``, complete or not at all (built under a ``.partial`` name, then renamed).

    python tests/upstream/overlays.py        # install every snapshot found (make overlays-upstream)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: Where the snapshots are looked for when $TITANFLOW_UPSTREAM_SNAPSHOTS is not set.
DEFAULT_SNAPSHOTS = ROOT.parent / "shared" / "upstream" / "torchtitan"
ARCHIVE = re.compile(r"torchtitan-(\d{4}-\d{2}-\d{2})-([0-9a-f]{7,40})\.tar\.gz")
OVERLAYS = Path(sys.prefix) / "overlays"


def snapshot_folder() -> Path:
    """The folder the snapshots are read from ($TITANFLOW_UPSTREAM_SNAPSHOTS, else :data:`DEFAULT_SNAPSHOTS`)."""
    folder = Path(os.environ.get("TITANFLOW_UPSTREAM_SNAPSHOTS", DEFAULT_SNAPSHOTS))
    return folder if folder.is_absolute() else ROOT / folder  # relative: to the checkout, as the Makefile passes it


def snapshots() -> dict[str, Path]:
    """``{date: archive}`` of every snapshot in :func:`snapshot_folder` (empty when the folder is absent).

    Raises:
        ValueError: a ``torchtitan-*.tar.gz`` there is not named ``torchtitan-<YYYY-MM-DD>-<commit>.tar.gz`` or not a
            file, or two snapshots share a date (a lane per date).
    """
    folder = snapshot_folder()
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("torchtitan-*.tar.gz")) if folder.is_dir() else []:
        match = ARCHIVE.fullmatch(path.name)
        if match is None or not path.is_file() or not _is_date(match[1]):
            raise ValueError(f"snapshot: {path} is not a file named torchtitan-<YYYY-MM-DD>-<commit>.tar.gz; fix: "
                             "rename or remove it")
        if match[1] in found:
            raise ValueError(f"snapshot: {path} and {found[match[1]]} share the date {match[1]}; fix: keep one")
        found[match[1]] = path
    return found


def _is_date(text: str) -> bool:
    from datetime import date

    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def overlay_dir(archive: Path) -> Path:
    """The overlay folder of ``archive``: its date and content key (module docstring)."""
    digest = hashlib.sha256(archive.read_bytes() + sys.version.encode()).hexdigest()[:12]
    return OVERLAYS / f"torchtitan-{ARCHIVE.fullmatch(archive.name)[1]}-{digest}"


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=True,
                          capture_output=True, text=True)


def _requirements(folder: Path) -> list[str]:
    """The snapshot's own requirements (its METADATA's ``Requires-Dist`` outside any extra)."""
    (metadata,) = folder.glob("torchtitan-*.dist-info/METADATA")
    wanted = [Requirement(line.split(":", 1)[1].strip()) for line in metadata.read_text().splitlines()
              if line.startswith("Requires-Dist:")]
    return [str(r) for r in wanted if r.marker is None or "extra" not in str(r.marker)]


def _missing_from_venv(requirements: list[str]) -> list[str]:
    """``name==version`` of each distribution pip would install into this venv for ``requirements`` (a dry run
    against what is installed, with torch held at the installed build, so nothing resolves a CUDA torch): what the
    venv lacks or holds at a version the snapshot does not admit."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        constraints.write(f"torch=={importlib.metadata.version('torch')}\n")
        constraints.flush()
        report = json.loads(_pip("install", "--dry-run", "--quiet", "--report", "-", "-c", constraints.name,
                                 *requirements).stdout)
    return [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in report["install"]]


def install(archive: Path) -> Path:
    """The overlay of ``archive``, installed first if it is not (module docstring); returns its folder.

    Raises:
        RuntimeError: pip failed (names the archive, with pip's last lines); nothing is left half-installed.
    """
    folder = overlay_dir(archive)
    if (folder / ".installed").exists():
        return folder
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        _pip("install", "--quiet", "--no-deps", "--target", str(partial), str(archive))
        added = _missing_from_venv(_requirements(partial))
        if added:
            _pip("install", "--quiet", "--no-deps", "--target", str(partial), *added)
    except subprocess.CalledProcessError as err:
        shutil.rmtree(partial, ignore_errors=True)
        said = "\n".join((err.stderr or err.stdout or "").strip().splitlines()[-5:])
        raise RuntimeError(f"snapshot: {archive} did not install (pip exited {err.returncode}):\n{said}") from None
    (partial / "overlay.json").write_text(json.dumps({"archive": archive.name, "added": added}, indent=1) + "\n")
    (partial / ".installed").touch()
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder


if __name__ == "__main__":
    try:
        found = snapshots()
        if not found:
            print(f"no torchtitan snapshots in {snapshot_folder()}: the upstream lanes will skip (make "
                  "test-upstream UPSTREAM_SNAPSHOTS=<folder>, or $TITANFLOW_UPSTREAM_SNAPSHOTS, names their folder)")
        for day, archive in found.items():
            print(f"{day}: {install(archive)}")
    except (ValueError, RuntimeError) as err:
        sys.exit(f"overlays: {err}")
