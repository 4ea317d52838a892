"""On a neuron target each rank imports torch_neuronx before anything is built (titan_cfg.entry.prepare): torch's
backend autoload may be off (torch-neuronx's Qwen3 tutorial sets TORCH_DEVICE_BACKEND_AUTOLOAD=0). Checked in a Python
of its own with the torch_neuronx stand-in (tests/stand_ins/neuron) first on its path (a cpu job imports none: every
end-to-end run here trains without it)."""

import os
import subprocess
import sys

from helpers import FIXTURES
from helpers.stand_ins import STAND_INS

from titanflow.launch.render import make_job
from titanflow.params import ScenarioRun
from titanflow.paths import REPO_ROOT


def test_a_neuron_rank_imports_torch_neuronx_first(tmp_path):
    job = make_job(ScenarioRun(scenario="native", target="trn2"), FIXTURES / "qwen3-4b-instruct-2507",
                   tmp_path / "run", files_only=True)
    path = job.write(tmp_path / "job.json")
    probe = "import sys; from titan_cfg import entry; entry.prepare(); print('torch_neuronx' in sys.modules)"
    env = {**os.environ, "TITANFLOW_JOB": str(path), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
           "PYTHONPATH": os.pathsep.join([str(STAND_INS / "neuron"), str(REPO_ROOT)])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
