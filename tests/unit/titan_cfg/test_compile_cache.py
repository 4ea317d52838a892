"""Compile-cache keys (titan_cfg.compile_cache): what changes the compiled code changes the folder."""

import subprocess
import sys

#: Prints the compile-cache key of a rendered job (argv[1]) as if run on target argv[2].
KEY_OF_RENDERED_JOB = """
import sys
from titan_cfg.compile_cache import cache_key
from titan_cfg.job import Job
from titan_cfg.targets import TARGETS
job = Job.read(sys.argv[1]).model_copy(update={"target": sys.argv[2]})
print(cache_key(job, TARGETS[sys.argv[2]](), {}))
"""


def _key_under(job_path, target: str, capability: str) -> str:
    """The key computed in a process whose ATen (and inductor's ISA choice) is held to ``capability``."""
    return subprocess.run([sys.executable, "-c", KEY_OF_RENDERED_JOB, str(job_path), target], capture_output=True,
                          text=True, check=True, env={"PATH": "", "ATEN_CPU_CAPABILITY": capability}).stdout.strip()


def test_the_cpu_instruction_set_is_in_the_key_of_cpu_targets_only(tmp_path, tiny_assets):
    """inductor's code for AVX2 is not the scalar code of a machine without it: another folder. The
    trn2 key (device code from neuronx-cc) does not move with the host CPU."""
    from titanflow.launch.render import render
    from titanflow.params import ScenarioRun

    job = render(ScenarioRun(steps=3), tiny_assets.weights_dir, tmp_path / "cpu").job_path
    assert _key_under(job, "cpu", "avx2") != _key_under(job, "cpu", "default")
    assert _key_under(job, "trn2", "avx2") == _key_under(job, "trn2", "default")
