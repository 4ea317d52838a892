"""Weight resolution: the run's Hugging Face weights folder.

``None`` -> the embedded tiny Qwen3 (built offline by ``titanflow assets``), or for
pretrained init its pretrained checkpoint (titanflow.weights.pretrained);
a local folder -> used in place; a Hub id -> ``huggingface_hub.snapshot_download``
(honours ``HF_HOME``, ``HF_TOKEN``, ``HF_HUB_OFFLINE``; files land in the HF cache).
"""

from __future__ import annotations

from pathlib import Path

from titanflow.run.params import is_hub_id

#: What a training run needs from a Hub repo (no optimizer states, no other formats).
HUB_PATTERNS = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"]


class WeightsError(RuntimeError):
    """The weights could not be resolved; the message names the id or folder and the fix."""


class TransientDownloadError(WeightsError):
    """A download failed in a way a retry may fix (connection reset, server error)."""


def download(repo_id: str) -> Path:
    """Download ``repo_id`` (config, safetensors, tokenizer) into the HF cache; return its folder.

    Raises:
        WeightsError: offline, unknown repo, gated repo without a token, or network failure.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_PATTERNS))
    except GatedRepoError as err:
        raise WeightsError(f"weights: {repo_id} is gated; accept its licence on the Hub and set HF_TOKEN") from err
    except RepositoryNotFoundError as err:
        raise WeightsError(f"weights: {repo_id} not found on the Hub (or private: set HF_TOKEN)") from err
    except LocalEntryNotFoundError as err:
        raise WeightsError(
            f"weights: {repo_id} is not in the local HF cache and the Hub cannot be reached "
            "(offline or HF_HUB_OFFLINE=1); download it where there is network, or pass a local folder"
        ) from err
    except OSError as err:  # connection errors surface as requests/httpx OSErrors
        raise TransientDownloadError(f"weights: downloading {repo_id} failed: {err}") from err


def resolve_weights(weights: str | None, init: str = "random", model_type: str = "qwen3") -> Path:
    """The local weights folder for ``weights`` (see module docstring); absolute. With no
    ``weights``, the embedded tiny model of ``model_type`` ("qwen3" or "qwen3_moe"), or for
    pretrained init its pretrained checkpoint.

    Raises:
        WeightsError: missing folder, folder without config.json, or a failed download.
    """
    if weights is None and init == "pretrained":
        from titanflow.weights.pretrained import ensure_pretrained

        return ensure_pretrained(model_type=model_type).resolve()
    if weights is None:
        from titanflow.assets import TINY_SPECS, ensure_assets

        return ensure_assets(spec=TINY_SPECS[model_type]).weights_dir.resolve()
    if is_hub_id(weights):
        folder = download(weights)
    else:
        folder = Path(weights).expanduser().resolve()
        if not folder.is_dir():
            raise WeightsError(f"weights: folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise WeightsError(f"weights: {folder} has no config.json; it is not a Hugging Face model folder")
    return folder
