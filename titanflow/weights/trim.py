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
- the tokenizer and generation files (titanflow.export.assemble.SIDE_FILES).

Tensors are read one at a time with safetensors (``safe_open``; a slice reads only its rows) and
written in shards of at most ``SHARD_BYTES`` (an index beside them when there is more than one): the
full 30B-A3B is 61 GB in bf16, which loading it as a transformers model would need in memory. A
folder without safetensors (random init needs only config.json and the tokenizer) is trimmed to its
config. The folder is built in a temporary sibling and renamed onto ``dest`` only when complete and
checked: transformers reads the trimmed sizes back from config.json, and the shards hold every tensor
of that model (titanflow.weights.check.check_checkpoint) and match its index (check_save_index).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from titanflow.assets.cache import build_once, cache_key
from titanflow.export.assemble import SIDE_FILES
from titanflow.export.structure import INDEX
from titanflow.run.params import Trim
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
    raise TrimError("weights: config.json declares no num_experts; only a Qwen3 MoE checkpoint is trimmed")


def check_trim(config: dict, trim: Trim) -> None:
    """``trim`` only removes: at most the layers, experts and experts per token config.json has.

    Raises:
        TrimError: naming ``trim`` and the checkpoint's sizes.
    """
    if config.get("model_type") != "qwen3_moe":
        raise TrimError(f"weights: model_type {config.get('model_type')!r}; only qwen3_moe checkpoints are trimmed")
    have = {"layers": config["num_hidden_layers"], "experts": experts_of(config),
            "top_k": config["num_experts_per_tok"]}
    over = [f"{name} {getattr(trim, name)} > {have[name]}" for name in have if getattr(trim, name) > have[name]]
    if over:
        raise TrimError(f"trim: {', '.join(over)} (the checkpoint's); trimming only removes, pass at most "
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
        from titanflow.weights.check import check_checkpoint, check_save_index

        check_checkpoint(out)
        check_save_index(out)


def trim_moe(source: Path, dest: Path, trim: Trim, source_id: str | None = None) -> Path:
    """Write the trimmed copy of the Qwen3 MoE folder ``source`` to ``dest`` (module docstring); returns ``dest``.

    ``source_id``: the source's weights id (titanflow.weights.identity), recorded in config.json.

    Raises:
        TrimError: ``dest`` exists, ``source`` has no config.json, is not a Qwen3 MoE, or is smaller than ``trim``.
        ValueError: the trimmed folder fails its checks (then nothing is left at ``dest``).
    """
    source, dest = Path(source).resolve(), Path(dest).resolve()
    if dest.exists():
        raise TrimError(f"dest: {dest} exists; pass a new folder (a trimmed folder is written once, never over another)")
    if not (source / "config.json").is_file():
        raise TrimError(f"weights: {source} has no config.json; pass a Hugging Face model folder")
    config = json.loads((source / "config.json").read_text())
    check_trim(config, trim)
    with_weights = any(source.glob("*.safetensors"))

    def build(out: Path) -> None:
        (out / "config.json").write_text(json.dumps(trimmed_config(config, trim, str(source), source_id), indent=2)
                                         + "\n")
        for name in SIDE_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, out / name)
        if with_weights:
            _write_weights(source, out, trim)
        _check_trimmed(out, trim, with_weights)

    return build_once(dest, build)


def ensure_trimmed(source: Path, trim: Trim, source_id: str | None, cache_root: Path) -> Path:
    """The trim of ``source`` kept in the cache (the flow's step): ``<cache_root>/trimmed/<name>-<key>``,
    written by :func:`trim_moe` on first use and reused after. ``name`` is the source's id (``/`` as
    ``--``) or folder name; ``key`` hashes the source's config.json and weights digest
    (titanflow.weights.digest: a Hub cache names each shard by its sha256, nothing is read), the id, the
    trim and ``TRIM_FORMAT``, so another source or trim gets its own folder.

    Raises:
        TrimError, ValueError: as :func:`trim_moe`.
    """
    from titanflow.weights.digest import weights_digest

    source = Path(source)
    if not (source / "config.json").is_file():
        raise TrimError(f"weights: {source} has no config.json; pass a Hugging Face model folder")
    weights = weights_digest(source) if any(source.glob("*.safetensors")) else None
    key = cache_key({"config": (source / "config.json").read_text(), "weights": weights, "id": source_id,
                     "trim": trim.model_dump(), "format": TRIM_FORMAT})
    name = source_id.replace("/", "--") if source_id else source.name
    folder = Path(cache_root) / "trimmed" / f"{name}-{key}"
    return folder if folder.is_dir() else trim_moe(source, folder, trim, source_id)
