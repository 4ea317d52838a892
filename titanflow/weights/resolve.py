"""Weight resolution: the run's Hugging Face weights folder, when the run names one (a run that names none trains
the embedded tiny Qwen3, built offline by titanflow.assets, or its pretrained checkpoint: titanflow.run.pretrained).

A local folder -> used in place; a Hub id -> ``$TITANFLOW_WEIGHTS_ROOT/<org>/<name>`` when that
folder holds a config.json (a node's own copy, named once, read offline: ``hf download <id>
--local-dir $TITANFLOW_WEIGHTS_ROOT/<id>``), else ``huggingface_hub.snapshot_download`` (honours
``HF_HOME``, ``HF_HUB_OFFLINE``; files land in the HF cache). Either way the run keeps the Hub id as its
weights id (titanflow.weights.identity), which the published figures are keyed by.

The Hub token is the caller's (titanflow.prefect_ops.hub_token.hub_token: huggingface_hub's own, else a Prefect
Secret block), else huggingface_hub's own (:func:`huggingface_token`: ``HF_TOKEN``, ``hf auth login``).

The token is held as a pydantic ``SecretStr`` (its ``repr`` and ``str`` are ``**********``) and
unwrapped only in the ``snapshot_download`` call. Every exception that leaves this module is a
:class:`WeightsError` whose text went through :func:`redact` and which carries no chained
exception (``__cause__`` and ``__context__`` are None): Prefect logs a failed task's whole
traceback chain, and huggingface_hub's errors may quote the server's reply or the request.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from pydantic import SecretStr

from titanflow.hub_id import is_hub_id

#: What a training run needs from a Hub repo (no optimizer states, no other formats).
HUB_PATTERNS = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"]

#: Environment variable naming a folder of local model copies laid out as ``<org>/<name>/`` (module docstring).
WEIGHTS_ROOT_ENV = "TITANFLOW_WEIGHTS_ROOT"

#: What replaces a secret in a message.
REDACTED = "<redacted>"

#: The form of a Hub user access token: ``hf_`` and 34 letters/digits (huggingface.co/settings/tokens);
#: matched from 20 on, so a token huggingface_hub found by itself is redacted too (our own regex:
#: huggingface_hub exports no redaction helper).
HUB_TOKEN_PATTERN = re.compile(r"hf_[A-Za-z0-9]{20,}")


class WeightsError(RuntimeError):
    """The weights could not be resolved; the message names the id or folder and the fix."""


class TransientDownloadError(WeightsError):
    """A download failed in a way a retry may fix (connection reset, server error)."""


class HubToken(NamedTuple):
    """A Hub access token and where it came from (the source may be logged; the value never is)."""

    value: SecretStr
    source: str


def redact(text: str, *secrets: SecretStr | str | None) -> str:
    """``text`` with each of ``secrets`` and anything shaped like a Hub token replaced by ``<redacted>``."""
    for secret in secrets:
        value = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        if value:
            text = text.replace(value, REDACTED)
    return HUB_TOKEN_PATTERN.sub(REDACTED, text)


def huggingface_token() -> HubToken | None:
    """The token huggingface_hub finds itself (``huggingface_hub.get_token()``: the ``HF_TOKEN`` environment
    variable, else the token ``hf auth login`` stored under ``HF_HOME``); None when there is none."""
    from huggingface_hub import get_token

    token = get_token()
    return HubToken(SecretStr(token), "huggingface_hub (HF_TOKEN or the token of `hf auth login`)") if token else None


#: getaddrinfo's answer when no name server knows the host: EAI_NONAME (glibc, macOS) or EAI_NODATA. A machine
#: without network (or without a resolver) answers it at once and on every retry. "Temporary failure in name
#: resolution" (EAI_AGAIN) is not one of them: that one a retry may fix.
_UNKNOWN_HOST = ("Name or service not known", "nodename nor servname provided", "No address associated with hostname")


def _host_unknown(err: BaseException | None) -> bool:
    """Whether ``err`` is a connection that failed because the Hub's host name does not resolve (:data:`_UNKNOWN_HOST`):
    retrying it 10 s later gets the same answer."""
    return err is not None and any(text in str(err) for text in _UNKNOWN_HOST)


def _download_error(repo_id: str, err: Exception, token: SecretStr | None) -> WeightsError:
    """The WeightsError for ``err`` raised by snapshot_download, its text redacted."""
    import httpx
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    detail = f"{type(err).__name__}: {redact(str(err), token)}"
    if isinstance(err, GatedRepoError):
        return WeightsError(f"weights: {repo_id} is gated; accept its licence on the Hub and set HF_TOKEN "
                            f"or {TOKEN_BLOCK_ENV} ({detail})")
    if isinstance(err, RepositoryNotFoundError):
        return WeightsError(f"weights: {repo_id} not found on the Hub (or private: set HF_TOKEN "
                            f"or {TOKEN_BLOCK_ENV}) ({detail})")
    status = getattr(getattr(err, "response", None), "status_code", None)
    if isinstance(err, LocalEntryNotFoundError):
        # snapshot_download falls back to the cache when the Hub fails; the Hub's own error is chained
        hub_status = getattr(getattr(err.__cause__, "response", None), "status_code", None)
        transient = ((hub_status or 0) >= 500 or isinstance(err.__cause__, (httpx.ConnectError, httpx.TimeoutException))
                     ) and not _host_unknown(err.__cause__)
        return (TransientDownloadError if transient else WeightsError)(
            f"weights: {repo_id} is not in the local HF cache and the Hub did not serve it (offline, "
            f"HF_HUB_OFFLINE=1, or a Hub error, quoted at the end); download it where there is network, or pass a local "
            f"folder ({detail})")
    if isinstance(err, HfHubHTTPError) and status is not None and status < 500:  # refused: a retry gets the same
        return WeightsError(f"weights: the Hub refused {repo_id} (HTTP {status}); check the token and your access "
                            f"to the repo ({detail})")
    if isinstance(err, OSError):  # connection errors and server errors surface as httpx/OSErrors
        return (WeightsError if _host_unknown(err) else TransientDownloadError)(
            f"weights: downloading {repo_id} failed: {detail}")
    return WeightsError(f"weights: downloading {repo_id} failed: {detail}")


def download(repo_id: str, token: HubToken | None = None) -> Path:
    """Download ``repo_id`` (config, safetensors, tokenizer) into the HF cache with ``token``; return its folder.

    Raises:
        WeightsError: offline, unknown repo, gated repo without a token, or any other failure
            (text redacted, nothing chained; module docstring).
        TransientDownloadError: a network or server failure a retry may fix.
    """
    from huggingface_hub import snapshot_download

    secret = token.value if token else None
    error = None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_PATTERNS,
                                      token=secret.get_secret_value() if secret is not None else None))
    except Exception as err:  # noqa: BLE001 - every failure leaves as a redacted WeightsError
        error = _download_error(repo_id, err, secret)
    raise error  # raised outside the except block: no chained exception carrying the raw text


def local_folder(weights: str) -> Path | None:
    """The folder ``weights`` names on this machine, absolute, without downloading anything: a Hub id's copy under
    ``$TITANFLOW_WEIGHTS_ROOT`` (when it holds a config.json) or the local path itself (which may not exist);
    None for a Hub id to download."""
    root = os.environ.get(WEIGHTS_ROOT_ENV)
    if is_hub_id(weights):
        copy = Path(root) / weights if root else None
        return copy.resolve() if copy is not None and (copy / "config.json").is_file() else None
    return Path(weights).expanduser().resolve()


def local_copy(weights: str) -> Path | None:
    """The folder a run of ``weights`` would read on this machine, found without downloading anything: a local
    folder holding a config.json, a Hub id's copy under ``$TITANFLOW_WEIGHTS_ROOT``, else its Hugging Face cache
    snapshot (``snapshot_download(local_files_only=True)``); None when there is none."""
    folder = local_folder(weights)
    if folder is not None:
        return folder if (folder / "config.json").is_file() else None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(weights, local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def download_command(repo_id: str, folder: Path | None = None) -> str:
    """The ``hf download`` command that puts ``repo_id`` where a run finds it offline (module docstring):
    into ``folder`` when given (a local folder to complete), else into ``$TITANFLOW_WEIGHTS_ROOT/<id>`` with
    the variable's value when it is set, else into the Hugging Face cache (``HF_HUB_CACHE``, named)."""
    root = os.environ.get(WEIGHTS_ROOT_ENV)
    if folder is None and root:
        folder = Path(root).expanduser().resolve() / repo_id
    if folder is not None:
        return f"hf download {repo_id} --local-dir {folder}"
    from huggingface_hub import constants

    return f"hf download {repo_id} (into the Hugging Face cache {constants.HF_HUB_CACHE})"


def resolve_weights(weights: str, token: HubToken | None = None) -> Path:
    """The local weights folder for ``weights``, a local folder or a Hub id (see module docstring); absolute (a run
    that names none trains the embedded tiny model: titanflow.run.pretrained.embedded_weights). A Hub id is
    downloaded with ``token``, or with huggingface_hub's own (:func:`huggingface_token`) when none is given.

    Raises:
        WeightsError: missing folder, folder without config.json, or a failed download.
    """
    folder = local_folder(weights)
    if folder is None:
        folder = download(weights, token or huggingface_token())
    elif not folder.is_dir():
        raise WeightsError(f"weights: folder {folder} does not exist; fix: give a local Hugging Face folder or a Hub id")
    if not (folder / "config.json").is_file():
        raise WeightsError(f"weights: {folder} has no config.json; it is not a Hugging Face model folder; fix: give the "
                           "model's folder, the one holding its config.json")
    return folder
