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


#: Prints (the capability, whether torch got imported) in a fresh process, the capability kept in argv[1].
CAPABILITY_KEPT = """
import sys
from pathlib import Path
from titan_cfg.cpu_isa import cpu_capability
print(cpu_capability(Path(sys.argv[1])), "torch" in sys.modules)
"""


def _capability_in_fresh_process(cache_dir, **env) -> str:
    return subprocess.run([sys.executable, "-c", CAPABILITY_KEPT, str(cache_dir)], capture_output=True, text=True,
                          check=True, env={"PATH": "", **env}).stdout.strip()


def test_the_capability_is_kept_by_its_key_and_read_back_without_importing_torch(tmp_path):
    import torch

    from titan_cfg.cpu_isa import capability_key

    asked = torch.backends.cpu.get_cpu_capability()  # what ATen says in this process
    assert _capability_in_fresh_process(tmp_path) == f"{asked} True"  # first: asked torch, and kept
    assert (tmp_path / "cpu-capability" / capability_key()).read_text() == asked
    assert _capability_in_fresh_process(tmp_path) == f"{asked} False"  # then: read back, torch never imported
    # ATEN_CPU_CAPABILITY is in the key: the scalar kernels' answer is kept apart, not read from the other
    assert _capability_in_fresh_process(tmp_path, ATEN_CPU_CAPABILITY="default") == "DEFAULT True"
    assert _capability_in_fresh_process(tmp_path, ATEN_CPU_CAPABILITY="default") == "DEFAULT False"
    assert _capability_in_fresh_process(tmp_path) == f"{asked} False"
    assert len(list((tmp_path / "cpu-capability").iterdir())) == 2


def test_an_empty_kept_capability_is_asked_again(tmp_path):
    import torch

    from titan_cfg.cpu_isa import capability_key

    asked = torch.backends.cpu.get_cpu_capability()
    kept = tmp_path / "cpu-capability" / capability_key()
    kept.parent.mkdir()
    kept.write_text("")  # e.g. written on a full disk
    assert _capability_in_fresh_process(tmp_path) == f"{asked} True"
    assert kept.read_text() == asked
