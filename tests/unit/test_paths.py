"""titanflow.paths: write_atomic on a full disk (the temporary file removed, the run folder's reserve given up once
for the record, then DiskFull naming what, where and how much is free; a real full file system: a 1 MiB tmpfs), the
roots, and the probe that a folder can be written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from titanflow import paths


@pytest.fixture()
def full_tmpfs(tmp_path):
    """A 2 MiB tmpfs holding a reserve (1 MiB) and a filler that takes the rest."""
    folder = tmp_path / "fs"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the test (needs root): {mounted.stderr.strip()}")
    try:
        paths.reserve_space(folder)
        with open(folder / "filler", "wb", buffering=0) as filler:
            with pytest.raises(OSError):
                while True:
                    filler.write(b"x" * 4096)
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


@pytest.mark.fault
def test_a_full_disk_gives_up_the_reserve_once_then_says_what_could_not_be_written(full_tmpfs):
    record = full_tmpfs / "summary.json"
    assert (full_tmpfs / paths.RESERVE).stat().st_size == paths.RESERVE_BYTES
    paths.write_atomic(record, "{}\n")  # room made by the reserve
    assert record.read_text() == "{}\n" and not (full_tmpfs / paths.RESERVE).exists()
    big = "x" * (4 * paths.RESERVE_BYTES)
    with pytest.raises(paths.DiskFull) as full:
        paths.write_atomic(record, big, what="the run record")
    assert full.value.errno == 28
    assert str(full.value).startswith(f"[Errno 28] disk full: the run record could not be written to {record}: "
                                      f"{full_tmpfs} has ")
    assert "(ENOSPC); fix: free space there" in str(full.value)
    assert record.read_text() == "{}\n"  # the file that held data keeps it
    assert sorted(os.listdir(full_tmpfs)) == ["filler", "summary.json"]  # no temporary file left


def test_an_empty_root_variable_means_the_default_not_the_working_folder(monkeypatch, tmp_path):
    """TITANFLOW_CACHE, TITANFLOW_RUNS and TITANFLOW_HISTORY set to "" (``Path("")`` is the working folder): the
    repository's own folders, as when they are unset; set, the folder named."""
    from titanflow import paths

    monkeypatch.chdir(tmp_path)
    for variable, root, default in (("TITANFLOW_CACHE", paths.cache_root, ".cache"),
                                    ("TITANFLOW_RUNS", paths.runs_root, "runs"),
                                    ("TITANFLOW_HISTORY", paths.history_root, "history")):
        monkeypatch.setenv(variable, "")
        assert root() == paths.REPO_ROOT / default
        monkeypatch.setenv(variable, str(tmp_path / "x"))
        assert root() == tmp_path / "x"


def test_runs_dir_under_a_file_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="runs_dir"):
        paths.check_runs_dir_writable(blocker / "runs")
    # the runs folder named is itself a file: said so, not mkdir's "File exists" as "not writable"
    with pytest.raises(ValueError, match=rf"^runs_dir: {blocker} is a file, not a folder; "):
        paths.check_runs_dir_writable(blocker)
    # a folder of a file system that takes no new file (procfs answers the probe file with ENOENT): said so
    with pytest.raises(ValueError, match=r"^runs_dir: /proc/sys is not writable \(the folder exists but its file "
                                         r"system takes no new file: No such file or directory\); fix: "):
        paths.check_runs_dir_writable(Path("/proc/sys"))
