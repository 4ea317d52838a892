"""The checks of whether this machine is ready to run a target, each a :class:`Check` with its fix: the library
that ``titanflow doctor`` (titanflow.run.doctor, every check printed) and a scenario run's gate
(titanflow.run.preflight, before anything runs) both call. The checks, by target (:func:`run_checks`):

| check | cpu, cuda | trn2 |
|---|---|---|
| ``python`` | ``profiles/cpu/.python-version``: 3.11 (the CPU torch 2.13.0 wheel, CI) | ``profiles/trn2/.python-version``: 3.12 (the walkthrough's; profiles/trn2/setup.sh reads the same file) |
| ``package <name>`` | each pin of ``profiles/cpu/constraints.txt`` of the stack (:data:`STACK`: torch, torchtitan, transformers) | each pin of ``profiles/trn2/constraints.txt`` of the stack |
| ``upstream names`` | every name the run's scenario takes from torchtitan, and the private torch names, resolve (titan_cfg.upstream, in a Python of its own after the target's compatibility layers), and no change of the torchtitan window blocks the scenario (titan_cfg.window: the API and its upstream date); each missing one is named with its module, and the line says which distribution is installed and where it sits in the window | the same, and the torch_neuronx and nkilib names |
| ``torchtitan fork`` | - | the importable ``torchtitan`` is torchtitan-neuron 0.2.2+neuron.1 (release-2.33): where it lives, its version |
| ``cuda devices`` | cuda: ``torch.cuda.is_available()`` and ``torch.cuda.device_count()`` >= ranks | - |
| ``neuron devices`` | - | ``neuron-ls --json-output`` (else ``/dev/neuron*``): devices x 8 physical cores >= ranks x LNC |
| ``NEURON_LOGICAL_NC_CONFIG`` | - | the ranks get the target's LNC; nothing in this shell or ``NEURON_CC_FLAGS`` says otherwise |
| ``kernel <op>=<impl>`` | every implementation registered for the target that needs a package or device has it (``rope=neuron``: nkilib's kernel module imports) |
| ``weights`` | the run's weights folder (``--weights``; default: the deployments', on trn2 the walkthrough's model) fits the run and is complete: titanflow.weights.fit.check_weights_folder (config.json, tokenizer, the index against the model) and titanflow.weights.check.check_checkpoint (every shard, header and tensor), whatever the init. The fix is the ``hf download`` command for the weights' Hub id (titanflow.weights.identity, else the scenario's in titan_cfg/published_expectations.toml) into the folder a run reads (titanflow.weights.resolve.download_command) |
| ``dataset`` | the folder the target trains on (titanflow.launch.dataset: Botchan; trn2: the fork's c4_test) |
| ``compile cache`` | ``<cache root>/compile`` writable |
| ``disk`` | free space under the runs folder for what the run writes there: step checkpoints, the export and logs (titanflow.run.disk, the figure preflight refuses a run by); parameters from the safetensors headers, or, before the weights are downloaded, estimated from config.json (the model built on the meta device), and then the download too: parameters x bytes of config.json's ``torch_dtype``, on the weights folder's disk |
| ``config <scenario>`` | torchtitan builds the scenario's rendered ``Trainer.Config`` (the weights' config.json, else the embedded tiny model's), in the upstream names' Python (titan_cfg.install_probe): what no name shows (an attribute of a config, a keyword of a builder) fails here | the same |

A scenario run on trn2 runs the same checks first (titanflow.run.preflight.require_ready), less
the weights (checked there and at ``render_config``, after a Hub download); one on cuda runs
:func:`check_cuda`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from titan_cfg import kernels, upstream
from titan_cfg.job import Job
from titan_cfg.model_spec import config_shape, read_config
from titan_cfg.profiles import PROFILES
from titan_cfg.published import published_weights_id
from titan_cfg.scenarios import SCENARIOS, on_node
from titan_cfg.targets import TARGETS, node_of
from titan_cfg.window import torchtitan_providers
from titanflow import paths
from titanflow.assets import TINY_SPECS, ensure_assets
from titanflow.hf_folder import read_headers
from titanflow.hub_id import is_hub_id
from titanflow.launch.dataset import C4_TEST_ENV, locate
from titanflow.launch.render import make_job
from titanflow.params import ScenarioRun
from titanflow.run.disk import Write, cache_writes, run_bytes, space_needs, trained_parameters
from titanflow.weights.check import check_checkpoint, meta_model
from titanflow.weights.fit import check_weights_folder
from titanflow.weights.identity import hub_cache_id, weights_id
from titanflow.weights.resolve import WEIGHTS_ROOT_ENV, download_command, local_copy
from titanflow.weights.trim import trimmed_config

#: The file of each install profile that names its Python (major.minor, as pyenv and uv read ``.python-version``):
#: cpu 3.11 (the CI machines' torch 2.13.0 wheel; the Makefile reads it), trn2 3.12 (the walkthrough's; Neuron 2.33
#: supports 3.12-3.14, the profile pins one; profiles/trn2/setup.sh reads it).
PYTHON_FILE = ".python-version"

#: The torchtitan fork trn2 runs: aws-neuron/torchtitan-neuron at release-2.33, installed as ``torchtitan``;
#: its version in Neuron 2.33 is 0.2.2+neuron.1 (Neuron release notes, "TorchTitan Neuron").
FORK_REPO, FORK_REF, FORK_VERSION = "https://github.com/aws-neuron/torchtitan-neuron.git", "release-2.33", "0.2.2+neuron.1"

#: Where the Neuron tools live on a Neuron DLAMI when they are not on PATH.
NEURON_TOOLS = Path("/opt/aws/neuron/bin")

#: The fix that installs the fork (the trn2 install profile's, titan_cfg.profiles), for the checks of the fork and its
#: dataset.
FORK_INSTALL = PROFILES["trn2"]().install

@dataclass(frozen=True)
class Check:
    """One check: its ``name``, whether it passed, what was found (``detail``) and, when it failed, the ``fix``."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        """``ok    <name>: <detail>`` or ``FAIL  <name>: <detail> -> fix: <fix>``."""
        return f"{'ok' if self.ok else 'FAIL':<6}{self.name}: {self.detail}" + ("" if self.ok else f" -> fix: {self.fix}")


def profile_pins(target: str) -> dict[str, Requirement]:
    """{distribution name: requirement} of ``profiles/<profile>/constraints.txt`` for ``target``.

    Raises:
        FileNotFoundError: the profile file is missing.
    """
    path = paths.REPO_ROOT / "profiles" / TARGETS[target]().profile / "constraints.txt"
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            pins[requirement.name] = requirement
    return pins


def profile_python(target: str) -> str:
    """The Python (``major.minor``) of ``target``'s install profile: ``profiles/<profile>/.python-version``.

    Raises:
        FileNotFoundError: the profile file is missing.
    """
    return (paths.REPO_ROOT / "profiles" / TARGETS[target]().profile / PYTHON_FILE).read_text().strip()


def check_python(target: str, version: tuple[int, int, int] | None = None) -> Check:
    """This interpreter (or ``version``) against the Python of the target's install profile (:func:`profile_python`)."""
    found = ".".join(map(str, version or sys.version_info[:3]))
    where = f"profiles/{TARGETS[target]().profile}/{PYTHON_FILE}"
    try:
        wanted = profile_python(target)
    except FileNotFoundError:
        return Check("python", False, f"{found}; the install profile names no Python ({where} is missing)",
                     "restore profiles/ from the repository")
    fix = TARGETS[target]().install_profile.python_fix.format(python=wanted)
    return Check("python", found in SpecifierSet(f"=={wanted}.*"), f"{found} ({target} needs Python {wanted}: {where})",
                 fix)


#: The stack a profile brings and titanflow never installs itself (pyproject.toml names none of it): what
#: :func:`check_packages` holds to the profile's pins. The profile's other pins (Prefect, pandas, ...) are the ends of
#: titanflow's own ranges, which pip holds an install to.
STACK = frozenset({"torch", "torchtitan", "transformers", "torch-neuronx", "neuronx-cc", "nki", "nkilib"})


def check_packages(target: str) -> list[Check]:
    """One check per pin of the target's install profile for a package of the :data:`STACK`: the installed version
    satisfies it."""
    try:
        pins = {name: pin for name, pin in profile_pins(target).items() if name in STACK}
    except FileNotFoundError as err:
        return [Check("packages", False, f"the install profile is missing ({err.filename})", "restore profiles/ "
                      "from the repository")]
    fix = TARGETS[target]().install_profile.install
    checks = []
    for name, requirement in pins.items():
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            checks.append(Check(f"package {name}", False, f"not installed ({target} pins {requirement})", fix))
            continue
        ok = requirement.specifier.contains(version, prereleases=True)
        checks.append(Check(f"package {name}", ok, f"{version} ({target} pins {requirement.specifier})", fix))
    return checks


def check_fork() -> Check:
    """The ``torchtitan`` that ranks import (found as ``import torchtitan`` would, without importing it) is the
    torchtitan-neuron fork: its distribution's version has the ``+neuron`` local label and the release of
    :data:`FORK_VERSION`."""
    fix = f"git clone -b {FORK_REF} {FORK_REPO} && pip install -e torchtitan-neuron (or {FORK_INSTALL})"
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        return Check("torchtitan fork", False, "torchtitan is not importable", fix)
    where = Path(next(iter(spec.submodule_search_locations)))
    installed = torchtitan_distribution()
    try:
        name, version = installed or ("torchtitan", "")
        parsed = Version(version)
    except InvalidVersion:
        return Check("torchtitan fork", False, f"torchtitan at {where} has no readable version (no installed "
                     f"distribution of {', '.join(TORCHTITAN_DISTRIBUTIONS)} provides it)", fix)
    wanted = Version(FORK_VERSION)
    ok = (parsed.local or "").startswith("neuron") and parsed.public == wanted.public
    what = "the fork" if ok else ("another release of the fork" if (parsed.local or "").startswith("neuron")
                                  else "not the fork (upstream torchtitan)")
    return Check("torchtitan fork", ok, f"{name} {version} at {where}: {what} (needs {FORK_VERSION}, "
                 f"{FORK_REF})", fix)


def _children_cpu_s() -> float:
    """User and system CPU seconds of this process's finished children so far (``getrusage(RUSAGE_CHILDREN)``)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def check_upstream(target: str, scenario: str | None = None) -> Check:
    """Every name ``scenario`` (None: every scenario) takes from torchtitan (and, on a Neuron target, torch_neuronx
    and nkilib) and every private torch name it uses (titan_cfg.upstream.names_for the target's device and the
    scenario) is in this install, and no change of the torchtitan window blocks the scenario (titan_cfg.window:
    an API it needs that the install lacks, named with the upstream date that brought it), resolved in a Python of
    its own after ``target``'s compatibility layers and the triton-free import of torchtitan, as titan_cfg.entry.prepare
    does in a rank (the caller imports no torch: a scenario run's preflight calls this on trn2). The detail says where
    the install sits in the window (:func:`titan_cfg.window.position`), names each missing name with the module it
    was looked for in, and the seconds the resolution took (the Python's start and its imports included: wall-clock,
    and the CPU seconds of the Python, which a busy machine does not stretch)."""
    return upstream_checks(target, scenario)[0]


def upstream_checks(target: str, scenario: str | None = None, job: Job | None = None) -> list[Check]:
    """:func:`check_upstream`'s check and, for a rendered ``job`` of ``scenario``, ``config <scenario>``: this
    torchtitan builds the job's ``Trainer.Config`` (titan_cfg.install_probe), where what no name shows fails (an
    attribute of a config, a keyword of a builder), both from one Python of their own."""
    spec = TARGETS[target]()
    asked = {"target_node": spec.node, "device": spec.device, "scenarios": [scenario] if scenario else list(SCENARIOS)}
    with tempfile.TemporaryDirectory() as folder:
        if job is not None:
            asked["job"] = str(job.write(Path(folder) / "job.json"))
        started, cpu_before = time.perf_counter(), _children_cpu_s()
        done = subprocess.run([sys.executable, "-m", "titan_cfg.install_probe", json.dumps(asked)],
                              capture_output=True, text=True, timeout=300, cwd=paths.REPO_ROOT, check=False)
    took = f"in {time.perf_counter() - started:.1f} s, {_children_cpu_s() - cpu_before:.1f} s of CPU"
    written = ", ".join(f"{k} {v}" for k, v in upstream.WRITTEN_AGAINST.items())
    fix = spec.install_profile.upstream_fix.format(fork=FORK_VERSION)
    fix += (", or adapt the code that takes each name and its entry in titan_cfg/upstream.py to this install (written "
            f"against {written}; the window it adapts to: titan_cfg/window.py)")
    if done.returncode != 0:
        return [Check("upstream names", False, f"the names could not be resolved ({took}): "
                      f"{done.stderr.strip()[-300:]}", fix)]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    lacking = {what: why for row in found["scenarios"].values() for what, why in row["missing"].items()}
    wanted = len(upstream.names_for(spec.device, scenario))
    blocked = {name: row["refusals"] for name, row in found["scenarios"].items() if row["refusals"]}
    installed = torchtitan_distribution()
    where = (f"{installed[0]} {installed[1]}" if installed else "torchtitan (no distribution found)") + \
        f" {found['position']}" + (f"; titanflow adapts to it: {', '.join(found['adapted_to'])}"
                                   if found["adapted_to"] else "")
    whom = f"{scenario}" if scenario else "every scenario"
    if lacking or blocked:
        parts = [f"{len(lacking)} missing of the {wanted} names {whom} takes: "
                 + "; ".join(f"{what}: {why}" for what, why in lacking.items())] if lacking else []
        parts += [f"{name} cannot run on this base: " + "; ".join(lines) for name, lines in blocked.items()]
        names = Check("upstream names", False, "; ".join(parts) + f" ({where}; resolved after the {target} "
                      f"target's compatibility layers, as its ranks would, {took})", fix)
    else:
        packages = sorted({n.module.split(".")[0] for n in upstream.names_for(spec.device, scenario)})
        names = Check("upstream names", True, f"all {wanted} names {whom} takes from {', '.join(packages)} "
                      f"resolve ({where}; {took})")
    if job is None:
        return [names]
    config = found["config"]
    what = f"the job's Trainer.Config ({job.shape.model_type}, {Path(job.weights_dir).name}'s config.json)"
    if config is None:
        return [names, Check(f"config {job.scenario}", False, f"{what} not built: this torchtitan cannot serve the "
                             "scenario (the upstream names line)", names.fix)]
    return [names, Check(f"config {job.scenario}", config == "built",
                         f"{what} {'builds' if config == 'built' else 'does not build: ' + config} on this torchtitan",
                         fix)]


#: The names the torchtitan package is installed under: upstream's, and the Neuron fork's (its repository is
#: torchtitan-neuron; Neuron's tutorials run recipes from torchtitan_neuron).
TORCHTITAN_DISTRIBUTIONS = ("torchtitan", "torchtitan-neuron", "torchtitan_neuron")


def torchtitan_distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed distribution that provides the ``torchtitan`` package that
    ``import torchtitan`` finds (among titan_cfg.window.torchtitan_providers, whichever of
    :data:`TORCHTITAN_DISTRIBUTIONS` or other name it was installed under), None when none does."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        return None
    where = Path(next(iter(spec.submodule_search_locations))).resolve()
    ordered = sorted(torchtitan_providers(), key=lambda n: (n not in TORCHTITAN_DISTRIBUTIONS, n))
    for name in ordered:  # the one whose files include the package found (a shadowed copy is not it)
        dist = importlib.metadata.distribution(name)
        if Path(dist.locate_file("torchtitan")).resolve() == where:
            return dist.metadata["Name"], dist.version
    if ordered:
        dist = importlib.metadata.distribution(ordered[0])
        return dist.metadata["Name"], dist.version
    return None


def neuron_ls() -> Path | None:
    """The ``neuron-ls`` executable: on PATH, else in :data:`NEURON_TOOLS`; None when absent."""
    found = shutil.which("neuron-ls") or (NEURON_TOOLS / "neuron-ls" if (NEURON_TOOLS / "neuron-ls").is_file() else None)
    return Path(found) if found else None


def check_devices(run: ScenarioRun, dev_dir: Path = Path("/dev")) -> Check:
    """Enough Neuron devices for the run's ranks x LNC physical cores: ``neuron-ls --json-output`` (its
    ``nc_count`` per device are the logical cores the Neuron tools see), else the ``/dev/neuron<N>`` nodes."""
    target = run.target_spec
    lnc, ranks = target.lnc or 1, run.nproc_per_node_resolved  # the ranks of this node
    per_device = target.physical_cores_per_device
    needed = ranks * lnc
    tool = neuron_ls()
    logical = None
    if tool is not None:
        try:
            listed = subprocess.run([str(tool), "--json-output"], check=False, capture_output=True, text=True,
                                    timeout=60)
            devices = json.loads(listed.stdout) if listed.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            devices = None
        if not isinstance(devices, list):
            return Check("neuron devices", False, f"{tool} --json-output lists no devices", "load the Neuron driver "
                         "(aws-neuronx-dkms) and check `neuron-ls`")
        count, source = len(devices), f"{tool.name} --json-output"
        logical = sum(int(device.get("nc_count", 0)) for device in devices)
    else:
        count, source = len(list(dev_dir.glob("neuron[0-9]*"))), f"{dev_dir}/neuron* (no neuron-ls)"
    physical = count * per_device
    most_ranks = physical // lnc
    seen = f"; neuron-ls counts {logical} logical cores" if logical is not None else ""
    fix = "run on a trn2.48xlarge (16 devices) with the Neuron driver loaded" + (
        f", or pass --nproc-per-node {most_ranks} or fewer" if most_ranks else "")
    return Check("neuron devices", physical >= needed and (logical is None or logical >= ranks),
                 f"{count} devices x {per_device} physical cores = {physical} ({source}){seen}; {ranks} ranks x "
                 f"LNC {lnc} need {needed}", fix)


def check_cuda(run: ScenarioRun) -> Check:
    """CUDA devices for the run's ranks on this node: ``torch.cuda.is_available()`` (a CUDA build of torch and a
    working driver) and ``torch.cuda.device_count()`` >= ranks (one GPU per rank)."""
    import torch  # lazy: torch

    ranks = run.world_size
    torch_pin = profile_pins(run.target).get("torch")
    install = f"install the CUDA build of torch {torch_pin.specifier if torch_pin else ''} (PyTorch's index for your CUDA)"
    if not torch.cuda.is_available():
        why = (f"torch {torch.__version__} is a CPU build (torch.version.cuda is None)" if torch.version.cuda is None
               else f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU (driver, "
                    "CUDA_VISIBLE_DEVICES)")
        return Check("cuda devices", False, f"torch.cuda.is_available() is False: {why}; {ranks} ranks need {ranks} "
                     "GPUs", f"run on a machine with {ranks} GPUs and their driver, and {install}")
    count = torch.cuda.device_count()
    fix = f"run on a machine with {ranks} GPUs" + (f", or pass --nproc-per-node {count} or fewer" if count else "")
    return Check("cuda devices", count >= ranks, f"{count} CUDA devices (torch.cuda.device_count()); {ranks} ranks "
                 f"need {ranks}", fix)


#: Compiler flags that set the logical-NeuronCore degree (neuronx-cc: --lnc, -lnc, --logical-nc-config).
LNC_FLAG = re.compile(r"(?:^|\s)(?:--lnc|-lnc|--logical-nc-config)[=\s]+(\d+)")


def check_lnc(run: ScenarioRun) -> Check:
    """The ranks' ``NEURON_LOGICAL_NC_CONFIG`` (the target's env) is the target's LNC, and this shell sets no
    other degree in it or in ``NEURON_CC_FLAGS`` (a kernel and the compiler at different degrees fail to
    compile: neuronx-cc NCC_EVRF066)."""
    target = run.target_spec
    ranks_value = target.env.get("NEURON_LOGICAL_NC_CONFIG")
    if ranks_value != str(target.lnc):
        return Check("NEURON_LOGICAL_NC_CONFIG", False, f"the {run.target} target gives its ranks {ranks_value!r}, "
                     f"its LNC is {target.lnc}", "set env NEURON_LOGICAL_NC_CONFIG to the target's lnc in "
                     "titan_cfg/targets.py")
    shell = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    if shell is not None and shell != ranks_value:
        return Check("NEURON_LOGICAL_NC_CONFIG", False, f"this shell sets {shell}, the ranks get {ranks_value}: tools "
                     "run by hand (neuron-ls, python -m titan_cfg.kernels.check) see another degree",
                     f"export NEURON_LOGICAL_NC_CONFIG={ranks_value} or unset it")
    flags = LNC_FLAG.search(os.environ.get("NEURON_CC_FLAGS", ""))
    if flags and flags.group(1) != ranks_value:
        return Check("NEURON_LOGICAL_NC_CONFIG", False, f"NEURON_CC_FLAGS compiles for LNC {flags.group(1)}, the "
                     f"ranks run at {ranks_value}", f"drop the LNC flag from NEURON_CC_FLAGS or set it to {ranks_value}")
    return Check("NEURON_LOGICAL_NC_CONFIG", True, f"the ranks get {ranks_value} ({run.target} target)"
                 + ("; this shell agrees" if shell else ""))


def check_kernels(target: str, chosen: dict[str, str] | None = None) -> list[Check]:
    """Every implementation registered for ``target`` that needs a package or a device can run here (its
    modules import: for ``rope=neuron`` nkilib's kernel module itself); with ``chosen`` (a run's implementation per
    op, ``ScenarioRun.kernels_resolved``) only those: native on trn2 (``rope=reference``) needs no NKI kernel."""
    spec, checks = TARGETS[target](), []
    for op in kernels.OPS.values():
        for impl in op.implementations.values():
            if spec.device not in impl.runs_on or not (impl.requires or impl.device):  # nothing to be missing
                continue
            if chosen is not None and chosen.get(op.name) != impl.name:  # not what the run takes
                continue
            missing = impl.unavailable()
            modules = ", ".join(impl.requires)
            checks.append(Check(f"kernel {op.name}={impl.name}", missing is None, missing or f"{modules} import",
                                spec.install_profile.kernel_fix.format(modules=modules)))
    return checks


def resolve_local(weights: str | None, init: str, model_type: str) -> Path:
    """The weights folder a run of ``weights`` would use, found without downloading or building anything:
    the embedded tiny model for None (its pretrained checkpoint is built from it on first use), else
    titanflow.weights.resolve.local_copy (a local folder, a Hub id under ``$TITANFLOW_WEIGHTS_ROOT`` or in
    the Hugging Face cache).

    Raises:
        ValueError: the folder is not on this machine, ``<what>; fix: <the exact command>``.
    """
    if weights is None:
        return ensure_assets(spec=TINY_SPECS[model_type]).weights_dir
    found = local_copy(weights)
    if found is not None:
        return found
    if not is_hub_id(weights):
        raise ValueError(f"{Path(weights).expanduser().resolve()} has no config.json; fix: pass a Hugging Face model "
                         "folder")
    root = os.environ.get(WEIGHTS_ROOT_ENV)
    under = f"not under ${WEIGHTS_ROOT_ENV}={root}" if root else f"${WEIGHTS_ROOT_ENV} unset"
    raise ValueError(f"not on this machine ({under}, not in the Hugging Face cache); fix: {download_command(weights)}")


def weights_fix(run: ScenarioRun, weights: str | None, folder: Path) -> str:
    """The fix for an incomplete weights ``folder``: the ``hf download`` command that completes it, for the Hub id
    the folder claims (titanflow.weights.identity), else the scenario's published one on the target
    (titan_cfg/published_expectations.toml, then the target's deployments); a Hugging Face cache snapshot
    is completed in the cache."""
    if weights is None:
        return "titanflow assets (rebuilds the embedded tiny model), or pass --weights a complete Hugging Face folder"
    claimed = weights_id(weights, folder)
    repo = claimed or published_weights_id(run.scenario, run.target) or default_weights(run.target, run.scenario)
    if repo is None or " " in repo:  # none known, or a trimmed id (titanflow trim writes those)
        return f"complete {folder} (the message says what it lacks), or pass --weights a complete Hugging Face folder"
    command = download_command(repo, None if hub_cache_id(folder) else folder)
    if claimed:
        return command
    return (f"if {folder} is to hold {repo} (the weights {run.scenario} on {run.target} is published with): "
            f"{command}; else pass --weights a complete Hugging Face folder")


def check_weights(run: ScenarioRun, weights: str | None) -> tuple[Check, Path | None]:
    """The run's weights folder fits the run (titanflow.weights.fit.check_weights_folder: config.json,
    tokenizer, the index against the model) and is complete whatever the init (titanflow.weights.check.
    check_checkpoint: every shard, header and tensor); returns the check and the folder (None when it is not here).
    Each failure's fix is the exact command (:func:`resolve_local`, :func:`weights_fix`)."""
    name = weights or f"embedded tiny {SCENARIOS[run.scenario].model_type}"
    try:
        folder = resolve_local(weights, run.init, SCENARIOS[run.scenario].model_type)
    except ValueError as err:
        detail, _, fix = str(err).partition("; fix: ")
        return Check("weights", False, f"{name}: {detail}", fix or "pass --weights with a Hugging Face folder"), None
    try:
        check_weights_folder(run, folder)
        if run.init != "pretrained":  # complete whatever the init (pretrained: checked just above)
            check_checkpoint(folder)
    except ValueError as err:
        return Check("weights", False, f"{name} at {folder}: {err}", weights_fix(run, weights, folder)), folder
    return Check("weights", True, f"{name} at {folder}: complete for {run.scenario}, init {run.init}"), folder


def check_dataset(run: ScenarioRun) -> Check:
    """The folder of the text the target trains on is there (titanflow.launch.dataset.locate)."""
    found = locate(run.target_spec.dataset)
    fix = (f"install the fork from its checkout ({FORK_INSTALL}), or export {C4_TEST_ENV}=<folder of c4_test>"
           if found.name == "c4_test" else "restore assets/botchan_c4/ from the repository")
    return Check("dataset", found.present, f"{found.name} at {found.path} ({found.located_by})"
                 + ("" if found.present else ": missing"), fix)


def check_compile_cache() -> Check:
    """A file can be created and removed under ``<cache root>/compile`` (the compile caches' parent)."""
    folder = paths.cache_root() / "compile"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
    except OSError as err:
        return Check("compile cache", False, f"{folder} is not writable ({err.strerror})",
                     "export TITANFLOW_CACHE=<a writable folder>")
    return Check("compile cache", True, f"{folder} is writable")


@dataclass(frozen=True)
class ModelSize:
    """How many ``parameters`` a weights folder's model has and where the count comes from (``source``); when
    the folder holds no safetensors yet (``downloaded`` False), the bytes its weights will take once downloaded:
    parameters x bytes of config.json's ``torch_dtype`` (``dtype``)."""

    parameters: int
    source: str
    downloaded: bool
    dtype: str
    weights_bytes: int


def model_size(folder: Path) -> ModelSize:
    """The parameters of ``folder``'s model: summed from its safetensors headers, else (config.json alone: the
    weights not downloaded yet) estimated from config.json, the model built on the meta device by transformers
    (titanflow.weights.check.meta_model; tied weights counted once, as the checkpoint stores them).

    Raises:
        ValueError: a safetensors header cannot be read.
    """
    import torch  # lazy: torch

    config = json.loads((folder / "config.json").read_text())
    dtype = config.get("torch_dtype") or config.get("dtype") or "float32"  # transformers' default when unnamed
    if any(folder.glob("*.safetensors")):
        parameters = sum(math.prod(shape) for tensors in read_headers(folder).values()
                         for _, shape in tensors.values())
        return ModelSize(parameters, "counted from the safetensors headers", True, dtype, 0)
    parameters = meta_model(folder).num_parameters()
    return ModelSize(parameters, "estimated from config.json", False, dtype, parameters * getattr(torch, dtype).itemsize)


def check_disk(run: ScenarioRun, folder: Path) -> Check:
    """Free space for what the run writes (titanflow.run.disk, the figures preflight refuses a run by): under the runs
    folder (step checkpoints, the export, logs), into the cache (a trim's checkpoint, a pretrained build) and, when
    the weights are not downloaded yet, on the weights folder's disk for them too; summed where they share a file
    system (titanflow.run.disk.space_needs)."""
    try:
        size = model_size(folder)
        config = read_config(folder)
        config = trimmed_config(config, run.trim, source="", source_id=None) if run.trim else config
        trained = trained_parameters(run, config_shape(config, SCENARIOS[run.scenario].model_type))
    except ValueError as err:
        return Check("disk", False, f"the weights cannot be sized: {err}", "complete the weights folder")
    try:
        paths.check_runs_dir_writable(run.runs_root())
    except ValueError as err:
        detail, _, fix = str(err).partition("; fix: ")
        return Check("disk", False, detail, fix)
    writes = run_bytes(run, trained)
    planned = [Write(run.runs_root(), writes.total, f"the run writes up to {writes.describe()}"),
               *cache_writes(run, config)]
    if not size.downloaded:
        planned.append(Write(folder, size.weights_bytes, f"the weights' download {size.weights_bytes / 2**30:.2f} GiB "
                                                         f"({size.dtype}) into {folder}",
                             "free space there, or download the weights to a larger disk"))
    needs = space_needs(planned)
    short = [need.fix for need in needs if not need.ok]
    return Check("disk", not short,
                 "; ".join(need.describe() for need in needs) + f" ({size.parameters:,} parameters, {size.source})",
                 "; ".join(short) or needs[0].fix)


def default_weights(target: str, scenario: str) -> str | None:
    """The weights the target's deployments train the scenario on (titan_cfg.scenarios.ON_NODE: on trn2 the
    walkthrough's Hub ids, found under $TITANFLOW_WEIGHTS_ROOT or in the HF cache; for moe the full Qwen3-30B-A3B the
    flow trims); None elsewhere (the embedded tiny model)."""
    return on_node(scenario, node_of(target)).weights


def config_job(run: ScenarioRun, folder: Path | None) -> Job | None:
    """The job of ``run`` as ``titanflow render`` writes it (files only, its run folder a placeholder) for the weights
    ``folder``, or, without one, for the embedded tiny model of the scenario's model type (the API is what the config
    check asks of torchtitan; the shape is the weights check's); None where neither fits."""
    if folder is None:
        try:
            folder = ensure_assets(spec=TINY_SPECS[SCENARIOS[run.scenario].model_type]).weights_dir
        except OSError:  # a cache that is not writable: the weights line says so
            return None
    try:
        return make_job(run, Path(folder), Path(tempfile.gettempdir()) / "titanflow-doctor", files_only=True)
    except ValueError:  # the folder does not fit the run: the weights line says why
        return None


def run_checks(run: ScenarioRun, weights: str | None, *, with_weights: bool = True,
               with_upstream: bool = True) -> list[Check]:
    """Every check of the module docstring for ``run`` (its target, scenario, init, ranks, runs folder) and
    ``weights``; ``with_weights=False`` leaves out the weights and the disk (sized from them), ``with_upstream=False``
    the upstream names (:func:`check_upstream`, a Python of its own: seconds). A target of many
    nodes is checked as one of its nodes (trn2-cluster as trn2: run it there, ``srun -N1 titanflow doctor``)."""
    target = run.target_spec.node
    cache = check_compile_cache()
    weights_check = folder = None
    if with_weights and (cache.ok or weights is not None):
        weights_check, folder = check_weights(run, weights)
    elif with_weights:  # the embedded tiny model is built into the cache
        weights_check = Check("weights", False, "not checked: the embedded tiny model is built into the cache, "
                                                "which is not writable", cache.fix)
    checks = [check_python(target), *check_packages(target)]
    config = []
    if with_upstream:
        names, *config = upstream_checks(target, run.scenario, config_job(run, folder if with_weights else None))
        checks.append(names)
    if run.target_spec.device == "neuron":
        checks += [check_fork(), check_devices(run), check_lnc(run)]
    if run.target_spec.device == "cuda":
        checks.append(check_cuda(run))
    checks += check_kernels(target, run.kernels_resolved)
    if weights_check is not None:
        checks.append(weights_check)
    checks += [check_dataset(run), cache]
    if with_weights and folder is not None:
        checks.append(check_disk(run, folder))
    elif with_weights:  # what the run writes is sized from its weights' config.json
        checks.append(Check("disk", False, "not checked: what the run writes is sized from its weights' config.json, "
                                           "which is not on this machine", "the weights' fix above, then titanflow "
                                           "doctor again"))
    checks += config
    return checks
