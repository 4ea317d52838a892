"""Trimming an MoE checkpoint: a Qwen3 MoE Hugging Face folder cut to its first layers and experts.

The walkthrough's scenario 3 trains Qwen3-30B-A3B trimmed to 4 layers, 64 experts, top-4. From a
full folder (config.json, safetensors, tokenizer) :func:`trim_moe` writes a new one holding:

- the first ``layers`` decoder layers (``model.layers.{i}.*``, i < layers) and every tensor outside
  the layers (embedding, final norm, lm_head);
- in each, the first ``experts`` experts (``mlp.experts.{e}.*``, e < experts; a fused
  ``mlp.experts.gate_up_proj`` [E, 2F, D] / ``down_proj`` [E, D, F] sliced on E) and the router's
  first ``experts`` rows (``mlp.gate.weight`` [E, D] -> [experts, D]), so expert e keeps its own
  router row;
- config.json saying so: ``num_hidden_layers``, ``num_experts`` (and ``num_local_experts``, the
  transformers 5.x name, where present), ``num_experts_per_tok``, ``mlp_only_layers`` and
  ``layer_types`` cut to the kept layers, and ``titanflow_trim`` recording the source, the sizes
  before and after and the trimmed weights' id (titanflow.weights.identity), also written as
  ``_name_or_path`` so the trimmed folder never claims the source's id;
- the tokenizer and generation files (titanflow.hf_folder.SIDE_FILES).

Tensors are read one at a time with safetensors (``safe_open``; a slice reads only its rows) and
written in shards of at most ``SHARD_BYTES`` (an index beside them when there is more than one): the
full 30B-A3B is 61 GB in bf16, which loading it as a transformers model would need in memory. The
source's weights are checked complete before anything is written (titanflow.weights.check.
check_checkpoint). Only for a random-init run (the flow's step, :func:`ensure_trimmed`) is a folder
without safetensors (random init needs only config.json and the tokenizer) trimmed to its config;
``titanflow trim`` and pretrained runs refuse it, naming what is missing. ``dest`` must be a new folder
outside the source, under one this process can write (:func:`check_dest`, before anything is read).
The folder is built in a temporary sibling and renamed onto ``dest`` only when complete and
checked: transformers reads the trimmed sizes back from config.json, and the shards hold every tensor
of that model (check_checkpoint) and match its index (check_save_index). Nothing already at ``dest`` is
replaced: a folder another process put there meanwhile is kept and this trim is refused.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from titanflow.build_cache import build_once, cache_key
from titanflow.hf_folder import INDEX, SIDE_FILES
from titanflow.params import Trim
from titanflow.paths import check_writable
from titanflow.weights.check import check_checkpoint, check_save_index
from titanflow.weights.digest import weights_digest
from titanflow.weights.identity import TRIM_KEY

#: Largest shard written (bytes of tensor data): transformers' own default for save_pretrained, 5 GB.
SHARD_BYTES = 5 * 10**9
#: Bump when the trimmed folder's bytes change for the same source and trim.
TRIM_FORMAT = 1

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.mlp\.experts\.(\d+)\.")
_FUSED_EXPERTS = re.compile(r"\.mlp\.experts\.(gate_up_proj|down_proj)$")
_ROUTER = re.compile(r"\.mlp\.gate\.weight$")


class TrimError(ValueError):
    """The folder cannot be trimmed as asked; the message names the field and the fix."""


def experts_of(config: dict) -> int:
    """The number of routed experts config.json declares (``num_experts``, or transformers 5.x's
    ``num_local_experts``).

    Raises:
        TrimError: neither is there (not an MoE config).
    """
    for key in ("num_experts", "num_local_experts"):
        if isinstance(config.get(key), int):
            return config[key]
    raise TrimError("weights: config.json declares no num_experts; only a Qwen3 MoE checkpoint is trimmed; fix: give a "
                    "Qwen3 MoE folder")


def check_trim(config: dict, trim: Trim) -> None:
    """``trim`` only removes: at most the layers, experts and experts per token config.json has.

    Raises:
        TrimError: naming ``trim`` and the checkpoint's sizes.
    """
    if config.get("model_type") != "qwen3_moe":
        raise TrimError(f"weights: model_type {config.get('model_type')!r}; only qwen3_moe checkpoints are trimmed; "
                        "fix: give a Qwen3 MoE folder")
    have = {"layers": config["num_hidden_layers"], "experts": experts_of(config),
            "top_k": config["num_experts_per_tok"]}
    over = [f"{name} {getattr(trim, name)} > {have[name]}" for name in have if getattr(trim, name) > have[name]]
    if over:
        raise TrimError(f"trim: {', '.join(over)} (the checkpoint's); trimming only removes; fix: pass at most "
                        f"layers={have['layers']},experts={have['experts']},top_k={have['top_k']}")


def trimmed_id(source_id: str | None, trim: Trim) -> str | None:
    """``<source id> trimmed to N layers, E experts, top-K``; None when the source's id is unknown."""
    if source_id is None:
        return None
    return f"{source_id} trimmed to {trim.layers} layers, {trim.experts} experts, top-{trim.top_k}"


def trimmed_config(config: dict, trim: Trim, source: str, source_id: str | None) -> dict:
    """config.json of the trimmed model (module docstring); ``config`` is not changed."""
    out = dict(config)
    before = {"num_hidden_layers": config["num_hidden_layers"], "num_experts": experts_of(config),
              "num_experts_per_tok": config["num_experts_per_tok"]}
    out["num_hidden_layers"] = trim.layers
    for key in ("num_experts", "num_local_experts"):
        if key in out:
            out[key] = trim.experts
    out["num_experts_per_tok"] = trim.top_k
    out["mlp_only_layers"] = [i for i in config.get("mlp_only_layers") or [] if i < trim.layers]
    if isinstance(config.get("layer_types"), list):
        out["layer_types"] = config["layer_types"][: trim.layers]
    new_id = trimmed_id(source_id, trim)
    out.pop("_name_or_path", None)  # the source's id must not name the trimmed weights
    if new_id:
        out["_name_or_path"] = new_id
    out[TRIM_KEY] = {"source": source_id or source, "weights_id": new_id, "before": before,
                     "after": {"num_hidden_layers": trim.layers, "num_experts": trim.experts,
                               "num_experts_per_tok": trim.top_k}}
    return out


def kept(name: str, trim: Trim) -> bool:
    """Whether tensor ``name`` of the source survives the trim (its layer and expert are kept)."""
    layer = _LAYER.match(name)
    if layer and int(layer.group(1)) >= trim.layers:
        return False
    expert = _EXPERT.search(name)
    return not (expert and int(expert.group(1)) >= trim.experts)


def _source_tensors(source: Path) -> dict[str, Path]:
    """{tensor name: shard file} of the source folder (its index, else every ``*.safetensors``)."""
    from safetensors import safe_open

    index = source / INDEX
    if index.is_file():
        return {name: source / shard for name, shard in json.loads(index.read_text())["weight_map"].items()}
    found = {}
    for shard in sorted(source.glob("*.safetensors")):
        with safe_open(shard, "pt") as f:
            found.update({name: shard for name in f.keys()})  # noqa: SIM118 - safe_open is not a mapping
    return found


def _write_weights(source: Path, out: Path, trim: Trim) -> None:
    """The kept tensors of ``source``, router rows and fused experts sliced, into shards of ``out``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    tensors = {name: shard for name, shard in _source_tensors(source).items() if kept(name, trim)}
    shards: list[dict] = [{}]
    size = 0
    for shard_file in sorted(set(tensors.values())):
        with safe_open(shard_file, "pt") as f:
            for name in sorted(n for n, s in tensors.items() if s == shard_file):
                if _ROUTER.search(name) or _FUSED_EXPERTS.search(name):  # [E, ...]: the first experts' rows
                    tensor = f.get_slice(name)[: trim.experts].contiguous()
                else:
                    tensor = f.get_tensor(name)
                nbytes = tensor.numel() * tensor.element_size()
                if shards[-1] and size + nbytes > SHARD_BYTES:
                    shards.append({})
                    size = 0
                shards[-1][name] = tensor
                size += nbytes
    if len(shards) == 1:
        save_file(shards[0], out / "model.safetensors", metadata={"format": "pt"})
        return
    weight_map, total = {}, 0
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, out / file, metadata={"format": "pt"})
        weight_map.update({name: file for name in shard})
        total += sum(t.numel() * t.element_size() for t in shard.values())
    (out / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")


def _check_trimmed(out: Path, trim: Trim, with_weights: bool) -> None:
    """transformers reads the trimmed sizes back; the shards hold the model's every tensor and match the index.

    Raises:
        TrimError: transformers reads other sizes.
        ValueError: from titanflow.weights.check, naming the missing or excess tensors.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(out)
    read = (config.num_hidden_layers, getattr(config, "num_experts", None) or config.num_local_experts,
            config.num_experts_per_tok)
    if read != (trim.layers, trim.experts, trim.top_k):
        raise TrimError(f"trim: transformers reads (layers, experts, top_k) {read} from the trimmed config.json, "
                        f"expected {(trim.layers, trim.experts, trim.top_k)}")
    if with_weights:
        check_checkpoint(out)
        check_save_index(out)


def has_weights(source: Path) -> bool:
    """Whether ``source`` holds (or its index names) safetensors weights, as opposed to config.json alone."""
    return any(Path(source).glob("*.safetensors")) or (Path(source) / INDEX).is_file()


def require_weights(source: Path, source_id: str | None) -> None:
    """``source`` holds safetensors weights: a trim for pretrained init (and ``titanflow trim``) copies them.

    Raises:
        TrimError: naming ``source``, what it lacks and the command that fetches it.
    """
    if has_weights(source):
        return
    fetch = (f"hf download {source_id} --local-dir {source}" if source_id and "/" in source_id
             else "copy the checkpoint's *.safetensors (and its model.safetensors.index.json) into it")
    raise TrimError(f"weights: {source} holds config.json but no safetensors weights (no *.safetensors, no {INDEX}); "
                    f"a trim copies the weights it keeps, so nothing was written; fix: {fetch}, or pass the "
                    "complete folder")


def check_dest(dest: Path, source: Path | None) -> None:
    """``dest`` can take a new trimmed folder: outside ``source`` (None: a Hub id not downloaded yet), not there
    yet, and under a folder this process can write; checked before anything is read or written.

    Raises:
        TrimError: naming ``dest`` and the fix.
    """
    dest = Path(dest).resolve()
    if source is not None:
        source = Path(source).resolve()
        if dest == source or source in dest.parents:
            where = "is the source folder" if dest == source else f"is inside the source folder {source}"
            raise TrimError(f"dest: {dest} {where}; fix: pass a new folder outside it (a trim is written beside its "
                            "source, never into it)")
    if dest.exists():
        raise TrimError(f"dest: {dest} exists; fix: pass a new folder (a trimmed folder is written once, never over another)")
    try:
        check_writable(dest.parent, "dest", "pass a folder under one you can write")
    except ValueError as err:
        raise TrimError(str(err)) from None


def trim_moe(source: Path, dest: Path, trim: Trim, source_id: str | None = None, *,
             weights_required: bool = True) -> Path:
    """Write the trimmed copy of the Qwen3 MoE folder ``source`` to ``dest`` (module docstring); returns ``dest``.

    ``source_id``: the source's weights id (titanflow.weights.identity), recorded in config.json.
    ``weights_required``: refuse a source without safetensors (``titanflow trim``, pretrained init); False
    (random init) trims such a folder to its config. Weights that are there are always trimmed, and checked
    complete first (titanflow.weights.check.check_checkpoint).

    The folder is built in a temporary sibling and renamed onto ``dest`` (titanflow.build_cache.build_once),
    so a failure leaves nothing at ``dest``, and a folder that appears at ``dest`` meanwhile is never replaced.

    Raises:
        TrimError: ``dest`` is inside ``source``, exists, is not writable, or was written by another process
            meanwhile; ``source`` has no config.json, no weights (``weights_required``), is not a Qwen3 MoE, or
            is smaller than ``trim``; writing failed (the OS error named).
        ValueError: ``source``'s weights are incomplete, or the trimmed folder fails its checks (then nothing
            is left at ``dest``).
    """
    source, dest = Path(source).resolve(), Path(dest).resolve()
    if not (source / "config.json").is_file():
        raise TrimError(f"weights: {source} has no config.json; fix: pass a Hugging Face model folder")
    check_dest(dest, source)
    config = json.loads((source / "config.json").read_text())
    check_trim(config, trim)
    if weights_required:
        require_weights(source, source_id)
    with_weights = any(source.glob("*.safetensors"))
    if with_weights or weights_required:
        check_checkpoint(source)  # every shard and tensor read below is there, before anything is written
    new_config = trimmed_config(config, trim, str(source), source_id)

    def build(out: Path) -> None:
        (out / "config.json").write_text(json.dumps(new_config, indent=2) + "\n")
        for name in SIDE_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, out / name)
        if with_weights:
            _write_weights(source, out, trim)
        _check_trimmed(out, trim, with_weights)

    try:
        built = build_once(dest, build)
    except OSError as err:
        raise TrimError(f"dest: writing the trim to {dest} failed ({err.strerror or err}); nothing was left there; "
                        f"fix: free space under {dest.parent} or pass another folder") from None
    found = json.loads((built / "config.json").read_text()).get(TRIM_KEY) if (built / "config.json").is_file() else None
    if found != new_config[TRIM_KEY]:  # build_once kept a folder another process renamed there first
        raise TrimError(f"dest: {dest} was written by another process while this trim ran (its config.json records "
                        f"{found!r}); it is kept as it is and this trim was discarded; fix: pass a new folder")
    return built


def ensure_trimmed(source: Path, trim: Trim, source_id: str | None, cache_root: Path, init: str = "pretrained") -> Path:
    """The trim of ``source`` kept in the cache (the flow's step): ``<cache_root>/trimmed/<name>-<key>``,
    written by :func:`trim_moe` on first use and reused after. ``name`` is the source's id (``/`` as
    ``--``) or folder name; ``key`` hashes the source's config.json and weights digest
    (titanflow.weights.digest: a Hub cache names each shard by its sha256, nothing is read), the id, the
    trim and ``TRIM_FORMAT``, so another source or trim gets its own folder. ``init``: a pretrained run's
    source must hold its weights (:func:`require_weights`); a random-init run's may be config.json alone.

    Raises:
        TrimError, ValueError: as :func:`trim_moe`.
    """
    source = Path(source)
    if not (source / "config.json").is_file():
        raise TrimError(f"weights: {source} has no config.json; fix: pass a Hugging Face model folder")
    if init == "pretrained":  # before the cache: a config-only source's trim (random init) has no weights
        require_weights(source, source_id)
    weights = weights_digest(source) if any(source.glob("*.safetensors")) else None
    key = cache_key({"config": (source / "config.json").read_text(), "weights": weights, "id": source_id,
                     "trim": trim.model_dump(), "format": TRIM_FORMAT})
    name = source_id.replace("/", "--") if source_id else source.name
    folder = Path(cache_root) / "trimmed" / f"{name}-{key}"
    return folder if folder.is_dir() else trim_moe(source, folder, trim, source_id,
                                                   weights_required=init == "pretrained")


def cached_trim(cache_root: Path, trimmed: dict) -> Path | None:
    """A folder of the cache's trims (:func:`ensure_trimmed`'s, under ``<cache_root>/trimmed/``) whose config.json
    records the same trim of a source of the same sizes as ``trimmed`` (a config.json :func:`trimmed_config` made),
    or None. Found by config.json alone, for a check before launch: ensure_trimmed's key also hashes the source's
    weights, which that check does not read, so a trim of another checkpoint of the same sizes counts as found."""
    wanted = trimmed[TRIM_KEY]
    for config in sorted((Path(cache_root) / "trimmed").glob("*/config.json")):
        found = json.loads(config.read_text()).get(TRIM_KEY) or {}
        if (found.get("before"), found.get("after")) == (wanted["before"], wanted["after"]):
            return config.parent
    return None
