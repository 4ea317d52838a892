"""Each CPU compat patch is still needed: these tests fail when upstream fixes the cause,
which is the signal to delete the patch (titan_cfg/compat/cpu.py).

Probes that import torchtitan run in a fresh interpreter, so patches applied by other
tests in this process cannot hide the upstream behaviour.
"""

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from titan_cfg.compat import cpu


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_triton_patch_needed_torchtitan_train_does_not_import_without_triton():
    assert cpu.triton_still_needed()
    proc = _fresh_python("import torchtitan.train")
    assert proc.returncode != 0 and "No module named 'triton'" in proc.stderr


def test_device_patch_needed_torchtitan_picks_cuda_on_a_cpu_build():
    assert cpu.device_type_still_needed() and cpu.device_module_still_needed()
    proc = _fresh_python("""
        from titan_cfg.compat.cpu import make_importable_without_triton
        make_importable_without_triton()
        from torchtitan.tools.utils import device_type
        print(device_type)
    """)
    assert proc.stdout.strip() == "cuda", proc.stderr


@pytest.fixture()
def one_rank_gloo(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_pg_timeout_patch_needed(one_rank_gloo):
    assert cpu.pg_timeouts_still_needed()  # torch has no public set_timeout
    with pytest.raises(TypeError, match="BarrierOptions"):  # gloo rejects the string id "cpu"
        dist.barrier(device_ids=[torch.cpu.current_device()])


def test_fsdp_sum_patch_needed_gloo_rejects_premul_sum(one_rank_gloo):
    premul_sum = dist._make_nccl_premul_sum(1.0)
    with pytest.raises(RuntimeError, match="PREMUL_SUM with Gloo"):
        dist.all_reduce(torch.ones(2), op=premul_sum)


def test_apply_patches_torchtitan_in_a_fresh_process():
    proc = _fresh_python("""
        from titan_cfg.compat import apply
        print(apply("cpu"))
        import torchtitan.train
        from torchtitan.components import metrics
        print(metrics.device_type, metrics.device_module.memory_stats()["active_bytes.all.peak"] > 0)
    """)
    assert proc.returncode == 0, proc.stderr
    applied, device = proc.stdout.strip().splitlines()
    assert applied == "['triton', 'device', 'pg_timeouts', 'fsdp_sum_reduction']"
    assert device == "cpu True"


def test_other_targets_get_no_patches():
    from titan_cfg.compat import apply

    assert apply("trn2") == [] and apply("cuda") == []
