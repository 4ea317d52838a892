"""torchtitan 0.3.0 on a CPU-only torch 2.13: the patches that make its trainer run.

torchtitan is written for accelerators; on a CPU-only build it fails in the
places listed below, each found by running the trainer and fixing the first
error. Every patch is one function with its reason, and a ``*_still_needed``
probe that checks the upstream behaviour directly, so ``tests/unit/titan_cfg/test_compat_cpu.py``
fails (and the patch can go) when an upgrade fixes it.

Apply with :func:`apply` *before* anything imports ``torchtitan.train``: some
patches replace module-level values that other torchtitan modules copy at import.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import resource
import sys
import types
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from titan_cfg import upstream

_APPLIED: list[str] = []


# 1. triton ------------------------------------------------------------------
# Some torchtitan modules do `import triton` at module level although their kernels run only on CUDA, and a plain
# import of the trainer reaches them: distributed/minimal_async_ep/kernels.py (0.3.0, from 2026-07 on main; reached
# from minimal_async_ep/api.py) and, on early 2026 bases, models/common/moe/kernels.py (reached from moe/utils.py). A
# CPU torch has no triton, and a fake top-level `triton` package breaks torch's inductor, so we register a stand-in
# for each such kernels module that the installed torchtitan has, with its public names raising when called.
_TRITON_ONLY: dict[str, tuple[str, ...]] = {
    "torchtitan.distributed.minimal_async_ep.kernels": (
        "copy_full_counts_to_peers_kernel", "copy_rows_to_peers_kernel", "expand_topk_grad_kernel",
        "fill_combine_metadata_kernel", "fill_dispatch_metadata_kernel", "invert_flat_indices_kernel",
        "reduce_topk_slots_kernel", "topk_scores_grad_kernel"),
    "torchtitan.models.common.moe.kernels": ("fill_indices_wrapper", "generate_permute_indices"),
}


def _needs_triton(module: str) -> bool:
    """The installed torchtitan's ``module`` file imports triton at module level. Read the file rather than
    find_spec(): finding a submodule imports its package, whose __init__ is what imports the kernels."""
    path = Path(importlib.util.find_spec("torchtitan").origin).parent.joinpath(*module.split(".")[1:])
    return path.with_suffix(".py").is_file() and "import triton" in path.with_suffix(".py").read_text()


def triton_still_needed() -> bool:
    """True while one of torchtitan's CUDA-only kernels modules cannot be imported without triton."""
    return importlib.util.find_spec("triton") is None and any(map(_needs_triton, _TRITON_ONLY))


def make_importable_without_triton() -> bool:
    """Register the triton-free stand-ins if needed (import-only: no behaviour changes).

    Returns True when a stand-in was registered.
    """
    if importlib.util.find_spec("triton") is not None:
        return False
    wanted = [m for m in _TRITON_ONLY if m not in sys.modules and _needs_triton(m)]
    for module in wanted:
        _stub_kernels(module)
    return bool(wanted)


def _stub_kernels(name: str) -> None:
    def unavailable(*_args, **_kwargs):
        raise RuntimeError(f"{name} needs triton (CUDA); not available on the cpu target")

    module = types.ModuleType(name, "CPU stand-in: the real module needs triton.")
    for attribute in _TRITON_ONLY[name]:
        setattr(module, attribute, unavailable)
    sys.modules[name] = module


# 2. device type and device module ---------------------------------------------
# tools/utils.py picks `_get_available_device_type() or "cuda"`, so a CPU-only
# torch ends in torch.cuda.set_device. The metrics' DeviceMemoryMonitor then
# calls get_device_name / get_device_properties / memory_stats /
# reset_peak_memory_stats / empty_cache, which torch.cpu lacks. We point
# torchtitan at "cpu" and at a module that answers those calls with host
# figures: process peak RSS as the peak "active"/"reserved" bytes, host RAM as capacity.
_CPU_MODULE_MISSING = ("get_device_name", "get_device_properties", "memory_stats",
                       "reset_peak_memory_stats", "empty_cache")


def device_type_still_needed() -> bool:
    """True while torchtitan would choose the "cuda" device on a CPU-only torch."""
    return upstream.available_device_type() is None


def device_module_still_needed() -> bool:
    """True while ``torch.cpu`` lacks an API that torchtitan's memory monitor calls."""
    return not all(hasattr(torch.cpu, name) for name in _CPU_MODULE_MISSING)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes (Linux ``ru_maxrss`` is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_device_module() -> types.ModuleType:
    module = types.ModuleType("titan_cfg.compat.cpu.device_module", "torch.cpu plus host memory figures.")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    module.get_device_name = lambda *_: platform.processor() or platform.machine()
    module.get_device_properties = lambda *_: types.SimpleNamespace(total_memory=total)
    module.memory_stats = lambda *_: {
        "active_bytes.all.peak": peak_rss_bytes(),
        "reserved_bytes.all.peak": peak_rss_bytes(),
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }
    module.reset_peak_memory_stats = lambda *_: None  # RSS peaks cannot be reset.
    module.empty_cache = lambda *_: None
    return module


def _use_cpu_device() -> None:
    import torchtitan.tools.utils as tt_utils

    tt_utils.device_type = "cpu"
    tt_utils.device_module = _cpu_device_module()


# 3. process-group timeouts ----------------------------------------------------
# distributed/utils.py set_pg_timeouts() calls
# barrier(device_ids=[current_device()]): on CPU that id is the string "cpu",
# which gloo's BarrierOptions rejects; it then calls torch.distributed.set_timeout,
# which torch 2.13 does not export (the private _set_pg_timeout exists).
def pg_timeouts_still_needed() -> bool:
    """True while torch has no public ``set_timeout`` (the barrier issue comes with it)."""
    return not hasattr(dist, "set_timeout")


def _set_pg_timeouts_cpu(timeout: timedelta, parallel_dims) -> None:
    dist.barrier()
    groups = [mesh.get_group() for mesh in parallel_dims.get_all_one_dimensional_meshes().values()]
    for group in [*groups, None]:
        upstream.set_pg_timeout(timeout, group)


def _patch_pg_timeouts() -> None:
    import torchtitan.distributed.utils as dist_utils

    dist_utils.set_pg_timeouts = _set_pg_timeouts_cpu


# 4. FSDP gradient reduction -------------------------------------------------
# distributed/fsdp.py sets gradient_divide_factor=1.0 so the trainer can scale
# by the global token count; FSDP then reduces with ReduceOp.PREMUL_SUM, which
# gloo rejects. Forcing plain SUM reductions gives the same result on CPU.
# (tests/unit/titan_cfg/test_compat_cpu.py checks on a 1-rank gloo group that PREMUL_SUM is still rejected.)
def _patch_fsdp_reduce_op() -> None:
    import torchtitan.distributed.fsdp as tt_fsdp
    from torch.distributed.fsdp import FSDPModule

    upstream = tt_fsdp.disable_fsdp_gradient_division

    def disable_division_with_sum_reduction(model: torch.nn.Module) -> None:
        upstream(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)

    tt_fsdp.disable_fsdp_gradient_division = disable_division_with_sum_reduction


def apply() -> list[str]:
    """Patch torchtitan for the cpu target; idempotent. Returns the patch names applied.

    Raises:
        RuntimeError: if ``torchtitan.train`` was imported first (patch 2 would
            then miss the modules that copied ``device_type`` at import).
    """
    if _APPLIED:
        return list(_APPLIED)
    if "torchtitan.trainer" in sys.modules:
        raise RuntimeError("titan_cfg.compat.cpu.apply() must run before torchtitan.trainer is imported")
    if triton_still_needed():
        make_importable_without_triton()
        _APPLIED.append("triton")
    if device_type_still_needed() or device_module_still_needed():
        _use_cpu_device()
        _APPLIED.append("device")
    if pg_timeouts_still_needed():
        _patch_pg_timeouts()
        _APPLIED.append("pg_timeouts")
    if importlib.util.find_spec("torchtitan.distributed.fsdp") is not None:  # from 2026-02-23's successors on
        _patch_fsdp_reduce_op()
        _APPLIED.append("fsdp_sum_reduction")
    return list(_APPLIED)
