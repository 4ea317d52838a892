"""Where a scenario runs: launcher, world size, environment and the target's
training knobs, one function per target (read them side by side).

A target says *how* to run; the scenario says *what* to train. Figures for trn2
come from the AWS walkthrough on one trn2.48xlarge: 16 Trainium2 chips x 8
physical NeuronCores, grouped in pairs at LNC=2 = 64 logical cores = 64 ranks,
about 24 GiB HBM each.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Target(BaseModel):
    """A hardware target: how torchrun launches ranks and what they may use.

    ``nproc_per_node`` ranks on one node (world size); ``global_batch_size``
    sequences per step over all ranks (``local = global / world size``),
    ``seq_len`` tokens each. ``max_world_size`` and ``min_step_s`` bound what a run may ask
    for: more ranks than the target has, or more steps than could finish within the run's
    timeout even at ``min_step_s`` seconds each, are refused before anything runs.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    device: str                  # torch device type of each rank
    nproc_per_node: int          # ranks = world size (single node)
    lnc: int | None = None       # Neuron logical-NeuronCore config (trn2 only)
    global_batch_size: int       # sequences per optimizer step, all ranks
    seq_len: int                 # tokens per sequence
    kernels: dict[str, str]      # default implementation per op (titan_cfg.kernels); scenarios may override
    spmd_backend: str | None = None  # torchtitan parallelism.spmd_backend override
    compile_backend: str | None = None  # torch.compile backend when compile is on
    activation_checkpoint: str = "full"  # "none" | "full" | "selective"
    mixed_precision_param: str = "bfloat16"  # FSDP parameter dtype in forward/backward
    env: dict[str, str]          # environment every rank gets (on top of the caller's)
    dataset: str = "botchan"     # the text trained on (titanflow.launch.dataset): botchan | c4_test
    max_world_size: int | None = None  # most ranks the target has; None: this machine's CPU count
    min_step_s: float = 0.05     # no step is faster (s): steps x this beyond the timeout is refused up front
    # Steps between full training-state checkpoints (model, optimizer, lr scheduler, dataloader position), which a
    # retried launch resumes from (titanflow.launch.resume); a run's default, capped at its steps. 500 is
    # torchtitan's own default interval.
    checkpoint_interval: int = 500
    # Pretrained init: repeat step 1's loss with transformers on the trainer's batch (titanflow.judge.first_step)
    # and judge against it. Only where that forward is the same arithmetic (fp32) and cheap next to training.
    independent_first_step: bool = False

    def missing_runtime(self) -> str | None:
        """Why this machine cannot launch the target (None when it can); checked before any compute."""
        import importlib.util

        if self.device == "neuron" and importlib.util.find_spec("torch_neuronx") is None:
            return "torch-neuronx is not installed (trn2 runs on a Neuron node; here it is rendered only)"
        if self.device == "cuda":
            import torch

            if torch.cuda.device_count() < self.nproc_per_node:
                return f"needs {self.nproc_per_node} CUDA devices, found {torch.cuda.device_count()}"
        return None


def cpu() -> Target:
    """CI, laptops: gloo, 2 ranks with FSDP 2, tiny shapes.

    FSDP over 2 processes needs ``spmd_backend="partial_dtensor"`` in torchtitan 0.3.0:
    the default fails ("all parameters must be DTensors") and ``full_dtensor`` logs a
    loss off by the data-parallel factor (measured: docs/measurements.md).
    """
    return Target(
        name="cpu",
        device="cpu",
        nproc_per_node=2,
        global_batch_size=4,
        seq_len=256,
        kernels={"rope": "reference", "attention": "sdpa"},  # FlexAttention has no backward on CPU
        spmd_backend="partial_dtensor",
        compile_backend="inductor",
        activation_checkpoint="none",  # tiny model: memory is not the limit, time is
        mixed_precision_param="float32",  # fp32 end to end, so logits compare exactly with transformers
        independent_first_step=True,  # a tiny model: the forward takes about 3 s
        # a save (151 MB: weights and AdamW's two moments) took 0.5-1.2 s on 2 busy cores; a retry repeats at
        # most 4 steps
        checkpoint_interval=5,
        env={
            "OMP_NUM_THREADS": "1",  # 2 ranks on 2 cores
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        },
    )


#: trn2's checkpoint interval, from a time budget: at most :data:`TRN2_CHECKPOINT_BUDGET_S` of training lost to a
#: failure, at :data:`TRN2_STEP_S` a step. The step time is an estimate until the node's history holds one: the
#: native 4B job (global batch 64 x 4096 = 262,144 tokens) costs about 8 x 4.0e9 params x 262,144 = 8.4e15 FLOP
#: a step (forward, backward and the forward full activation checkpointing repeats), and 16 Trainium2 chips give
#: 16 x 667 = 10,672 bf16 TFLOP/s (AWS Neuron docs, Trainium2 architecture); at 40 % of that, 2 s a step. A save
#: writes the full training state, about 48 GB for 4B parameters (fp32 weights and AdamW's two moments), which
#: at about 1 GB/s is under a minute: every 10 minutes keeps it below 10 % of the training time.
TRN2_CHECKPOINT_BUDGET_S, TRN2_STEP_S = 600, 2.0
TRN2_CHECKPOINT_INTERVAL = int(TRN2_CHECKPOINT_BUDGET_S / TRN2_STEP_S)  # 300 steps


def trn2() -> Target:
    """One trn2.48xlarge: 64 ranks at LNC=2 on torch-neuronx (walkthrough scenario 2:
    global batch 64, batch 1 per rank, data parallel over all ranks).

    ``NEURON_LOGICAL_NC_CONFIG`` must match the compiler's logical-NC setting;
    public scripts also set ``NEURON_RT_VIRTUAL_CORE_SIZE``. ``NEURON_RT_NUM_CORES`` is not set: the
    Neuron runtime documents it as the number of NeuronCores one process requires (reserved until it
    exits), so 64 in each of 64 ranks would ask for the node 64 times; TorchNeuron's torch.distributed
    guide launches torchrun ranks without it, each on its own logical core (to confirm on the node).
    ``seq_len`` 4096 is
    ``qwen3_32b()``'s, which the walkthrough's native scenario starts from.
    """
    return Target(
        name="trn2",
        device="neuron",
        nproc_per_node=64,
        lnc=2,
        max_world_size=64,  # 16 chips x 8 physical cores / LNC 2
        global_batch_size=64,
        seq_len=4096,
        kernels={"rope": "reference", "attention": "sdpa"},  # walkthrough: model_registry("4B", attn_backend="sdpa")
        compile_backend="neuron",
        dataset="c4_test",  # the walkthrough trains on torchtitan's own c4_test split
        checkpoint_interval=TRN2_CHECKPOINT_INTERVAL,
        env={
            "NEURON_LOGICAL_NC_CONFIG": "2",
            "NEURON_RT_VIRTUAL_CORE_SIZE": "2",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        },
    )


def cuda() -> Target:
    """torchtitan as upstream intends: NCCL, flex attention, one node of 8 GPUs."""
    return Target(
        name="cuda",
        device="cuda",
        nproc_per_node=8,
        max_world_size=8,
        min_step_s=0.01,
        global_batch_size=64,
        seq_len=4096,
        kernels={"rope": "reference", "attention": "flex"},
        compile_backend="inductor",
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )


TARGETS = {"cpu": cpu, "trn2": trn2, "cuda": cuda}
