"""End to end on CPU with the walkthrough's transformers (5.16.0, the trn2 install profile's) instead
of the cpu profile's 5.23.0: the native and hf_backend scenarios pass, 3 steps each (about two
minutes each on 2 cores).

The overlay ``.venv/overlays/trn2`` (``make overlay-trn2``; ``make test`` builds it) holds the trn2
profile's PyPI packages; first on ``PYTHONPATH`` it replaces the venv's transformers in the flow
and, through the launch environment, in every rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from titanflow.record.summary import read_summary


ROOT = Path(__file__).resolve().parents[2]
OVERLAY = Path(sys.prefix) / "overlays" / "trn2"
TITANFLOW = Path(sys.executable).parent / "titanflow"


def _walkthrough_transformers() -> str:
    """The version the trn2 profile pins (profiles/trn2/constraints.txt: the walkthrough's 5.16.0)."""
    for line in (ROOT / "profiles" / "trn2" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and Requirement(line).name == "transformers":
            (spec,) = Requirement(line).specifier
            return spec.version
    raise AssertionError("profiles/trn2/constraints.txt pins no transformers")


@pytest.fixture(scope="module")
def overlay_env() -> dict[str, str]:
    assert (OVERLAY / ".installed").exists(), f"{OVERLAY} is missing: run `make overlay-trn2`"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return env | {"PYTHONPATH": os.pathsep.join([str(OVERLAY), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_overlay_is_the_walkthrough_transformers_and_the_venv_meets_its_requirements(overlay_env):
    version = subprocess.run([sys.executable, "-c", "import transformers; print(transformers.__version__)"],
                             capture_output=True, text=True, check=True, env=overlay_env).stdout.strip()
    assert version == _walkthrough_transformers() == "5.16.0"
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False,
                           env=overlay_env)
    assert check.returncode == 0, check.stdout  # --no-deps was enough: 5.16.0's requirements all hold


@pytest.mark.parametrize("scenario", ["native", "hf_backend"])
def test_cpu_scenario_passes_with_the_walkthrough_transformers(tmp_path, overlay_env, scenario, prefect_api):
    proc = subprocess.run([str(TITANFLOW), "run", scenario, "--target", "cpu", "--steps", "3", "--runs-dir", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=900,
                          env=overlay_env | {"PREFECT_API_URL": prefect_api})  # the session's server: no start of its own
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = tmp_path.iterdir()
    summary = read_summary(run_dir / "summary.json")
    assert summary.verdict == "pass" and summary.failed_task is None
    # the flow (training's record, export validation) ran with 5.16.0 ...
    assert summary.environment["versions"]["transformers"] == _walkthrough_transformers()
    # ... and so did every rank: the launch environment puts the overlay on their path
    rank_path = json.loads((run_dir / "job" / "launch.json").read_text())["env"]["PYTHONPATH"].split(os.pathsep)
    assert rank_path[:2] == [str(ROOT), str(OVERLAY)]
    assert summary.validation.load.problems == [] and summary.validation.load.forward_finite
    assert len(summary.losses) == 3
