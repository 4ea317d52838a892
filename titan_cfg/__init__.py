"""Everything torchtitan sees: model specs from HF config.json, targets, scenarios,
the job file that carries a rendered run to torchrun, and the torchrun entry module.

Nothing here imports torch or torchtitan at module level except the modules that
run inside torchrun (``entry``, ``config_registry``, ``trainer_config``, ``compat``,
``probe``, and the kernel implementations under ``kernels/``; the registry itself,
``kernels/__init__``, is light), so flows can import the light parts cheaply.
"""
