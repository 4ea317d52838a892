"""The numerics environment (titanflow.judge.environment) that goldens and history rows record."""

import json
import subprocess
import sys

from titan_cfg.cpu_isa import cpu_model_and_flags
from titanflow.judge.environment import environment_key, numerics_environment

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse4_2 avx fma avx2 sha_ni
processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse4_2 avx fma avx2 sha_ni
"""


def test_model_and_the_flags_that_pick_kernels_are_read_from_cpuinfo(tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert cpu_model_and_flags(tmp_path / "cpuinfo") == ("AMD EPYC 7B13", ["avx", "avx2", "fma"])


def test_the_key_follows_capability_flags_and_versions_not_the_model_name():
    env = {"cpu_model": "A", "cpu_capability": "AVX512", "isa_flags": ["avx2"], "versions": {"torch": "2.13.0"}}
    assert environment_key(env) == environment_key(env | {"cpu_model": "B"})
    assert environment_key(env) != environment_key(env | {"cpu_capability": "AVX2"})
    assert environment_key(env) != environment_key(env | {"versions": {"torch": "2.14.0"}})
    assert environment_key(None) is None


def test_the_capability_is_what_aten_dispatches_to():
    """ATEN_CPU_CAPABILITY=default holds ATen to its scalar kernels (what a machine without AVX runs):
    the recorded capability says so, and only that field differs from this process's record."""
    code = "import json; from titanflow.judge.environment import numerics_environment as e; print(json.dumps(e()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"ATEN_CPU_CAPABILITY": "default", "PATH": ""}).stdout
    held, here = json.loads(out), numerics_environment()
    assert held["cpu_capability"] == "DEFAULT"
    assert held == here | {"cpu_capability": "DEFAULT"}
