"""Where a scenario runs: nodes x ranks per node, scheduler, environment and the target's
training knobs, one function per target (read them side by side).

A target says *how* to run; the scenario says *what* to train. Figures for trn2
come from the AWS walkthrough on one trn2.48xlarge: 16 Trainium2 chips x 8
physical NeuronCores, grouped in pairs at LNC=2 = 64 logical cores = 64 ranks,
about 24 GiB HBM each. ``trn2-cluster`` is N of those nodes, scheduled by Slurm.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from titan_cfg.profiles import PROFILES, Profile

#: How a training is started: ``local`` runs torchrun on this machine (one node); ``slurm`` submits one Slurm job
#: whose tasks run one torchrun agent per node (titanflow.launch.slurm); ``kubernetes``: the flow runs in pod 0 of a
#: Kubernetes Indexed Job, one pod per node, and every pod runs a torchrun agent (titanflow.launch.kubernetes). A run on
#: more than one node is a Slurm job unless it says ``kubernetes``.
Scheduler = Literal["local", "slurm", "kubernetes"]


class WorkPool(BaseModel):
    """A Prefect work pool whose flow runs train on the target that names it (:attr:`Target.work_pools`); its
    deployments are derived from it (titanflow.prefect_ops.deployments, which writes deployments/prefect.yaml).

    ``kind``: Prefect's work-pool type, ``process`` (the worker starts each flow run as a process on its machine) or
    ``kubernetes`` (each flow run is a Kubernetes job made from the base job template ``template``, a file relative to
    the repository root that titanflow.launch.kubernetes.template writes for the target); ``parameters``: what every
    run of the pool adds to its deployments' parameters; ``install``: each flow run first installs the target's install
    profile on its node, the profile's pull step (titan_cfg.profiles.Profile.pull_script); ``note``: where its worker
    runs and what its machines hold, ``worker``: the command that starts the worker there (both are comments of
    deployments/prefect.yaml).
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["process", "kubernetes"] = "process"
    template: str | None = None
    parameters: dict = {}
    install: bool = False
    note: str = ""
    worker: str = ""

    @model_validator(mode="after")
    def _a_template_for_kubernetes(self) -> "WorkPool":
        if (self.kind == "kubernetes") != (self.template is not None):
            raise ValueError(f"a {self.kind} work pool {'needs' if self.kind == 'kubernetes' else 'takes no'} base job "
                             "template file (template=...)")
        return self


class Target(BaseModel):
    """A hardware target: how torchrun launches ranks and what they may use.

    ``nnodes`` nodes of ``nproc_per_node`` ranks each: world size = nnodes x nproc_per_node
    (:attr:`world_size`); ``global_batch_size`` sequences per step over all ranks
    (``local = global / world size``), ``seq_len`` tokens each. ``max_nproc_per_node`` and
    ``min_step_s`` bound what a run may ask for: more ranks on a node than it has, or more
    steps than could finish within the run's timeout even at ``min_step_s`` seconds each, are
    refused before anything runs. ``node_type`` names the machine each node is (default: the
    target's own name): the per-node tables (a scenario's rank limits, seq_len and kernels per
    target, the kernel registry, ``titanflow doctor``) are keyed by it, so ``trn2-cluster`` gets
    everything ``trn2`` has.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    device: str                  # torch device type of each rank
    nnodes: int = 1              # nodes (torchrun --nnodes)
    nproc_per_node: int          # ranks per node (torchrun --nproc-per-node)
    node_type: str | None = None  # the machine each node is, for per-node tables; None: name
    scheduler: Scheduler = "local"  # local torchrun, or one Slurm job over the nodes
    # torchrun's c10d rendezvous: seconds the agents wait for every node to join (torchrun's default: 600)
    rdzv_join_timeout_s: int = 600
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
    max_nproc_per_node: int | None = None  # most ranks one node has; None: this machine's CPU count
    min_step_s: float = 0.05     # no step is faster (s): steps x this beyond the timeout is refused up front
    # Steps between full training-state checkpoints (model, optimizer, lr scheduler, dataloader position), which a
    # retried launch resumes from (titanflow.launch.resume); a run's default, capped at its steps. 500 is
    # torchtitan's own default interval.
    checkpoint_interval: int = 500
    # Pretrained init: repeat step 1's loss with transformers on the trainer's batch (titanflow.judge.first_step)
    # and judge against it. Only where that forward is the same arithmetic (fp32) and cheap next to training.
    independent_first_step: bool = False
    # torchrun forks the ranks from one process that imported torchtitan (titan_cfg.forked_torchrun) instead of
    # starting each afresh: only where no device runtime is initialised before the fork (cpu)
    fork_ranks: bool = False
    # Memory one rank's device has (bytes): a run whose step cannot fit in it is refused before launch
    # (titanflow.weights.fit.check_logits_fit). None: on the CPU, the launching machine's memory shared by the
    # node's ranks; elsewhere (cuda: each GPU's own) not checked.
    rank_memory_bytes: int | None = None
    # The install profile its nodes run (profiles/<profile>/: Python version, pinned stack; titanflow doctor checks it):
    # a key of titan_cfg.profiles.PROFILES
    profile: str = "cpu"
    # Prefect work pools whose runs train on this target, by name (titanflow.prefect_ops.deployments derives the
    # deployments from them); {}: no deployment, run by hand
    work_pools: dict[str, WorkPool] = {}
    # A qwen3-bisect deployment: a bisect can build this target's environment for a revision whose dependencies
    # differ (titanflow.bisect.environment: the cpu install profile's Makefile target)
    bisect: bool = False
    # The install profile a qwen3-canary deployment pins, beside its successor (profiles/<p>/successor or
    # profiles/<p>-next/; titanflow.successor): one is written for the target's first work pool once the profile names
    # a successor; None: no canary
    canary_profile: str | None = None
    # Physical cores of one device, grouped by ``lnc`` into a rank's logical core (trn2: a Trainium2 chip's 8
    # NeuronCores); None where ranks are not cores of a device
    physical_cores_per_device: int | None = None

    @model_validator(mode="after")
    def _one_node_or_slurm(self) -> "Target":
        if self.nnodes < 1 or self.nproc_per_node < 1:
            raise ValueError(f"{self.name}: nnodes and nproc_per_node must be at least 1")
        if self.nnodes > 1 and self.scheduler == "local":
            raise ValueError(f"{self.name}: {self.nnodes} nodes need scheduler='slurm' or 'kubernetes' (local runs "
                             "one node)")
        return self

    @model_validator(mode="after")
    def _a_profile_its_pools_can_install(self) -> "Target":
        if self.profile not in PROFILES:
            raise ValueError(f"{self.name}: no install profile {self.profile!r} (titan_cfg.profiles.PROFILES: "
                             f"{', '.join(PROFILES)})")
        installing = [pool for pool, record in self.work_pools.items() if record.install]
        if installing and not self.install_profile.pull_step:
            raise ValueError(f"{self.name}: work pool {installing[0]} installs the {self.profile} profile, which has "
                             "no pull step; fix: install=False")
        return self

    @property
    def install_profile(self) -> Profile:
        """The record of the install profile its nodes run (titan_cfg.profiles)."""
        return PROFILES[self.profile]()

    @property
    def world_size(self) -> int:
        """Ranks over all nodes: ``nnodes x nproc_per_node``."""
        return self.nnodes * self.nproc_per_node

    @property
    def node(self) -> str:
        """The machine each node is (``node_type``, else the target's name): the key of per-node tables."""
        return self.node_type or self.name

    def missing_runtime(self) -> str | None:
        """Why this machine cannot launch the target (None when it can); checked before any compute. A target
        Slurm or Kubernetes schedules runs on its nodes, not here: None (Slurm's own check is
        titanflow.launch.slurm.job.check_submission)."""
        import importlib.util

        if self.scheduler != "local":
            return None

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
        fork_ranks=True,  # each rank's own import of torch and torchtitan cost about 3 s (titan_cfg.forked_torchrun)
        # a save (151 MB: weights and AdamW's two moments) took 0.5-1.2 s on 2 busy cores; a retry repeats at
        # most 4 steps
        checkpoint_interval=5,
        work_pools={"cpu": WorkPool(note="a worker on this machine", worker="make server")},
        bisect=True,
        canary_profile="cpu-lowest",  # the lowest lane's stack pinned, the newest end (cpu) its successor
        env={
            "OMP_NUM_THREADS": "1",  # 2 ranks on 2 cores
            # glibc's malloc asks for transparent huge pages (madvise) on the memory it maps: every step allocates
            # and frees the logits and their gradients (2 x 512 tokens x 151936 x 4 B, about 0.6 GB a rank) with
            # mmap, and the 4 KiB page faults were a quarter of the ranks' CPU time. benchmarks/malloc_hugepages.py
            # (the job's launch.sh with and without it, 6 steps, two pairs): system time 0.60x, rank 0's tokens/s
            # from step 2 1.78x (297 -> 528; 1.76x in another run, 1.18x with one pair), wall 0.86x, peak RSS
            # 1.00x, losses equal at every step. Without THP in the kernel ("never") or in a glibc before 2.35 it
            # does nothing. A caller's own GLIBC_TUNABLES come first and win (titanflow.launch.render).
            "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
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

#: Device memory of one trn2 rank: a Trainium2 chip has 96 GiB of HBM and 8 physical NeuronCores (AWS Neuron docs,
#: Trainium2 architecture; 16 chips and 1.5 TiB in a trn2.48xlarge), which LNC=2 pairs into 4 logical cores, one
#: rank each: 24 GiB a rank.
TRN2_RANK_MEMORY_BYTES = 96 * 2**30 // (8 // 2)  # a chip's HBM over its logical cores at LNC=2


def trn2() -> Target:
    """One trn2.48xlarge: 64 ranks at LNC=2 on torch-neuronx (walkthrough scenario 2:
    global batch 64, batch 1 per rank, data parallel over all ranks).

    ``NEURON_LOGICAL_NC_CONFIG`` must match the compiler's logical-NC setting (the Neuron variables it sets
    and leaves unset, each with its source: the comments of ``env``). ``NEURON_RT_NUM_CORES`` is not set: the
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
        max_nproc_per_node=64,  # 16 chips x 8 physical cores / LNC 2
        global_batch_size=64,
        seq_len=4096,
        # attention causal over the packed row, as the walkthrough's fork runs model_registry("4B", attn_backend="sdpa"):
        # no mask, so torch-neuronx's fused SDPA kernel applies (titan_cfg.kernels.attention)
        kernels={"rope": "reference", "attention": "causal"},
        compile_backend="neuron",
        dataset="c4_test",  # the walkthrough trains on torchtitan's own c4_test split
        checkpoint_interval=TRN2_CHECKPOINT_INTERVAL,
        rank_memory_bytes=TRN2_RANK_MEMORY_BYTES,
        profile="trn2",  # the walkthrough's stack in the Neuron DLAMI (profiles/trn2)
        canary_profile="trn2",  # its canary once profiles/trn2-next/ holds the next Neuron release (docs/trn2.md)
        work_pools={"trn2": WorkPool(install=True, note="its worker on the Neuron node",
                                     worker="TITANFLOW_ROOT=<checkout> prefect worker start --pool trn2")},
        physical_cores_per_device=8,  # a Trainium2 chip (AWS Neuron docs, Trainium2 architecture)
        env={
            # The runtime's logical-NeuronCore degree, which neuronx-cc and NKI kernels follow: "Logical NeuronCore
            # configuration", https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/logical-neuroncore-config.html
            "NEURON_LOGICAL_NC_CONFIG": "2",
            # Left unset, on purpose:
            # - NEURON_RT_VIRTUAL_CORE_SIZE: that page names NEURON_LOGICAL_NC_CONFIG as the runtime's LNC setting;
            #   the runtime's variable reference (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/api/nrt-env-var-reference.html,
            #   "every runtime variable that is supported") does not list it, nor does torch-neuronx read it; older
            #   Neuron inference samples export it beside NEURON_LOGICAL_NC_CONFIG; no training source does.
            # - NEURON_CC_FLAGS: neuronx-cc compiles for LNC 2 on trn2 and takes its degree from NEURON_LOGICAL_NC_CONFIG
            #   (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/compiler/error-codes/EVRF066.html); the walkthrough
            #   passes no flags. A shell's own flags still reach the ranks, and titanflow doctor fails one whose --lnc
            #   disagrees.
            # - TORCH_DEVICE_BACKEND_AUTOLOAD: the walkthrough (Neuron docs, training/torchtitan) sets none; only
            #   torch-neuronx's own Qwen3 tutorial for upstream torchtitan exports 0 (docs/src/tutorials/train_qwen3.rst
            #   of torch-neuronx's source), which stops `import torch` from loading torch_neuronx by itself, and the
            #   fork's code paths that may rely on that load are unread (docs/trn2-walkthrough.md, "Neuron variables").
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        },
    )


def cuda() -> Target:
    """torchtitan as upstream intends: NCCL, flex attention, one node of 8 GPUs. No work pool: no CUDA node is part of
    the reference set-up, and a deployment nothing can pick up would only queue runs."""
    return Target(
        name="cuda",
        device="cuda",
        nproc_per_node=8,
        max_nproc_per_node=8,
        min_step_s=0.01,
        global_batch_size=64,
        seq_len=4096,
        kernels={"rope": "reference", "attention": "flex"},
        compile_backend="inductor",
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )


#: trn2-cluster's network settings for EFA, the fabric between trn2 nodes (every rank, every node). The three
#: libfabric variables are the ones AWS's Neuron multi-node training scripts export on Slurm (aws-neuron's
#: neuronx-distributed and neuronx-nemo-megatron examples); EFA itself is a prerequisite of multi-node Neuron
#: training ("How to use torch.distributed on Neuron",
#: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/torch-distributed.html, and "How to prepare
#: trn1.32xlarge for multi-node execution",
#: https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.1/frameworks/torch/torch-neuronx/setup-trn1-multi-node-execution.html).
#: ``NEURON_RT_ROOT_COMM_ID`` (the Neuron runtime's collectives bootstrap, host:port of rank 0) is not set: the
#: host of rank 0 is chosen by torchrun's c10d rendezvous at run time, and torch-neuronx's process group sets the
#: variable from ``MASTER_ADDR`` (which torchrun gives every rank as rank 0's host) and a free port of rank 0 when
#: it is unset.
EFA_ENV = {
    "FI_PROVIDER": "efa",             # libfabric over EFA, not TCP
    "FI_EFA_USE_DEVICE_RDMA": "1",    # EFA's RDMA reads and writes straight to device memory
    "FI_EFA_FORK_SAFE": "1",          # the ranks fork (dataloader workers, compiler) after registering memory
}
#: Nodes of trn2-cluster when a run does not say (``nnodes``): the smallest cluster.
TRN2_CLUSTER_NODES = 2


def trn2_cluster() -> Target:
    """N trn2.48xlarge nodes (default :data:`TRN2_CLUSTER_NODES`; a run's ``nnodes`` picks N) under Slurm: each node
    exactly as :func:`trn2` (64 ranks at LNC=2), torchrun's c10d rendezvous across them, the EFA settings of
    :data:`EFA_ENV`. The global batch grows with the nodes (64 sequences per node, batch 1 per rank), as data
    parallel scaling of the walkthrough's job does; a run may pass another ``global_batch_size``."""
    node = trn2()
    return node.model_copy(update={
        "name": "trn2-cluster", "node_type": "trn2", "nnodes": TRN2_CLUSTER_NODES, "scheduler": "slurm",
        "canary_profile": None,  # a canary runs on one node (trn2's pool)
        "work_pools": {
            "trn2-cluster": WorkPool(
                note="its worker on the Slurm cluster's login node, which submits each run's training as one Slurm "
                     "job over trn2.48xlarge nodes (titanflow/launch/slurm/; docs/many-nodes.md), with the cluster's "
                     "settings in the worker's environment. The login node only renders and follows the Slurm job: no "
                     "install step there (the nodes run the trn2 profile from the shared file system; check one with "
                     "`srun -N1 titanflow doctor --target trn2`)",
                worker="TITANFLOW_ROOT=<checkout on the shared file system> [TITANFLOW_SLURM_PARTITION=<p>] "
                       "[TITANFLOW_SLURM_ACCOUNT=<a>] [TITANFLOW_SLURM_SBATCH_ARGS=...] prefect worker start --pool "
                       "trn2-cluster"),
            "trn2-eks": WorkPool(
                kind="kubernetes", template="deployments/kubernetes/trn2-eks.json",
                parameters={"scheduler": "kubernetes"},
                note="each flow run is an Indexed Job of trn2.48xlarge pods, pod 0 the flow, the others torchrun "
                     "agents (titanflow/launch/kubernetes/; docs/many-nodes.md). The pods' image holds the trn2 "
                     "profile and titanflow; the checkout and run folders are on the shared file system every pod "
                     "mounts (the work pool's variables). Its worker, with prefect-kubernetes, anywhere that reaches "
                     "the cluster",
                worker="prefect worker start --pool trn2-eks"),
        },
        "global_batch_size": node.global_batch_size * TRN2_CLUSTER_NODES,
        "env": {**node.env, **EFA_ENV},
    })


TARGETS = {"cpu": cpu, "trn2": trn2, "cuda": cuda, "trn2-cluster": trn2_cluster}


def work_pools() -> dict[str, tuple[str, WorkPool]]:
    """Work pool -> (the target its runs take, its record), from each target's ``work_pools``.

    Raises:
        ValueError: two targets name the same pool (a target copied with its pools), naming both and the fix.
    """
    pools: dict[str, tuple[str, WorkPool]] = {}
    for name, target in TARGETS.items():
        for pool, record in target().work_pools.items():
            if pool in pools:
                raise ValueError(f"work_pools: targets {pools[pool][0]} and {name} both name the work pool {pool}; "
                                 f"fix: give {name} its own pool, or work_pools={{}} for none")
            pools[pool] = (name, record)
    return pools


def node_of(target: str) -> str:
    """The node type of ``target`` (:attr:`Target.node`), the key of the per-node tables (titan_cfg.scenarios.ON_NODE,
    the golden loss curves); a name that is no target stands for itself."""
    return TARGETS[target]().node if target in TARGETS else target


def implied_scheduler(target: str, nnodes: int) -> Scheduler:
    """The scheduler of a job that names none: ``slurm`` on more than one node, else the target's."""
    scheduler = TARGETS[target]().scheduler
    return "slurm" if nnodes > 1 and scheduler == "local" else scheduler
