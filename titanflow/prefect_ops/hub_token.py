"""The Hub token of a run that downloads its weights, first found wins:

1. huggingface_hub's own (titanflow.weights.resolve.huggingface_token): the ``HF_TOKEN`` environment variable, else
   the token ``hf auth login`` stored under ``HF_HOME``;
2. the Prefect Secret block named by ``$TITANFLOW_HF_TOKEN_BLOCK`` (``Secret.load(name).get()``), on the server the
   run reports to.

The token is handed to titanflow.weights.resolve.resolve_weights as a pydantic ``SecretStr``; what fails here is a
titanflow.weights.resolve.WeightsError whose text went through its ``redact`` and which chains no exception.
"""

from __future__ import annotations

import os

from prefect.blocks.system import Secret
from pydantic import SecretStr

from titanflow.hub_id import is_hub_id
from titanflow.weights.resolve import HubToken, WeightsError, huggingface_token, redact

#: Environment variable naming the Prefect Secret block that holds a Hub token, read only when
#: huggingface_hub finds no token of its own (``HF_TOKEN``, ``hf auth login``).
TOKEN_BLOCK_ENV = "TITANFLOW_HF_TOKEN_BLOCK"


def hub_token() -> HubToken | None:
    """The Hub token, in the order of the module docstring; None when there is none.

    Raises:
        WeightsError: ``$TITANFLOW_HF_TOKEN_BLOCK`` names a block that cannot be loaded (no such
            block, no Prefect API) or whose value is not a non-empty string.
    """
    token = huggingface_token()
    if token:
        return token
    name = os.environ.get(TOKEN_BLOCK_ENV, "").strip()
    if not name:
        return None
    error = None
    try:
        value = Secret.load(name).get()
    except Exception as err:  # noqa: BLE001 - any failure to load is reported as one WeightsError
        error = WeightsError(
            f"weights: {TOKEN_BLOCK_ENV}={name!r}: the Prefect Secret block could not be loaded "
            f"({type(err).__name__}: {redact(str(err))}); create it (UI: Blocks > Secret, or "
            f"prefect.blocks.system.Secret(value=...).save({name!r})) on the server this run reports to, "
            f"or unset {TOKEN_BLOCK_ENV}")
    if error is not None:
        raise error  # raised outside the except block: no chained exception (module docstring)
    if not isinstance(value, str) or not value.strip():
        raise WeightsError(f"weights: the Prefect Secret block {name!r} ({TOKEN_BLOCK_ENV}) holds "
                           f"{type(value).__name__ if not isinstance(value, str) else 'an empty string'}, "
                           "not a Hub token; set its value to the token string")
    return HubToken(SecretStr(value.strip()), f"Prefect Secret block {name!r}")


def token_for(weights: str) -> HubToken | None:
    """:func:`hub_token` where ``weights`` is a Hub id (a download may need it); None for a local folder.

    Raises:
        WeightsError: as :func:`hub_token`.
    """
    return hub_token() if is_hub_id(weights) else None
