"""The torchtitan side: what runs inside the ranks, and everything torchtitan sees: model specs
from HF config.json, targets, scenarios, the job file that carries a rendered run to torchrun,
the torchrun entry module, compat layers and the kernel override registry. It imports nothing
of ``titanflow`` (tests/unit/test_layout.py), so the ranks never load the pipeline.

Nothing here imports torch or torchtitan at module level except the modules that
run inside torchrun (``entry``, ``config_registry``, ``trainer_config``, ``compat``,
``probe``, and the kernel implementations under ``kernels/``; the registry itself,
``kernels/__init__``, is light), so flows can import the light parts cheaply.
"""
