"""A content hash of a weights folder, so a run on other weights (another build of the pretrained
tiny checkpoint, another snapshot) is visible as such in the summary, the history and the goldens.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from titanflow.build_cache import sha256_file

#: A Hugging Face cache blob is named by the sha256 of an LFS file's content (huggingface_hub's cache layout).
_SHA256_NAME = re.compile(r"[0-9a-f]{64}")


def file_digest(path: Path) -> str:
    """sha256 hex of one file's content; for a Hub-cache symlink to a blob named by its sha256, that
    name (no read: multi-GB shards cost nothing)."""
    target = path.resolve()
    if path.is_symlink() and target.parent.name == "blobs" and _SHA256_NAME.fullmatch(target.name):
        return target.name
    return sha256_file(target)


def weights_digest(weights_dir: Path) -> str:
    """16 hex digits over (name, content sha256) of every ``*.safetensors`` and the index of ``weights_dir``.

    Raises:
        FileNotFoundError: the folder holds no ``*.safetensors``.
    """
    files = sorted([*Path(weights_dir).glob("*.safetensors"), *Path(weights_dir).glob("*.safetensors.index.json")])
    if not any(f.name.endswith(".safetensors") for f in files):
        raise FileNotFoundError(f"weights: {weights_dir} holds no *.safetensors to hash")
    lines = "".join(f"{f.name} {file_digest(f)}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()[:16]
