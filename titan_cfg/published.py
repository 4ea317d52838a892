"""Published first-step losses as data: ``published_expectations.toml`` beside this module.

Each entry names a scenario, target, init and weights id (titanflow.weights.identity), the figure
(nats), its band, why the band is that wide, its source and the workload it was measured with
(dataset, ranks, sequences per rank, tokens per sequence). The file is validated on load, so a
misspelt scenario or a band of 0 fails at the first read, naming the entry.

:func:`published_for_job` gives the figure that applies to a rendered job, recorded in
``job.json`` (``published``); the loss verdict (titanflow.judge.loss) uses it: for pretrained init
with the same workload it is the expectation, within its band; for random init it is reported
beside the derived value; with another workload it is reported beside, the differences listed.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from titan_cfg.job import Init, PublishedFirstStep
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.targets import TARGETS

#: The table of published figures.
PUBLISHED_FILE = Path(__file__).with_name("published_expectations.toml")


class Workload(BaseModel):
    """What a published figure was measured with: the text, ranks, sequences per rank per step and
    tokens per sequence. Step 1's loss is the mean over exactly these tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str = Field(description="the text's name (titanflow.launch.dataset), e.g. c4_test")
    world_size: int = Field(gt=0, description="ranks (data parallel over all of them)")
    local_batch_size: int = Field(gt=0, description="sequences per rank per step")
    seq_len: int = Field(gt=0, description="tokens per sequence")


class PublishedLoss(BaseModel):
    """One published first-step loss (an ``[[expectation]]`` of the table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    scenario: str
    target: str
    init: Init
    weights_id: str = Field(min_length=1, description="the weights it was measured on: a Hub id")
    first_step_loss: float = Field(gt=0, description="nats")
    band: float = Field(gt=0, description="allowed |measured - figure| (nats)")
    band_reason: str = Field(min_length=1)
    source: str = Field(min_length=1, description="where the figure is published, with its conditions")
    workload: Workload

    @field_validator("scenario")
    @classmethod
    def _known_scenario(cls, value: str) -> str:
        if value not in SCENARIOS:
            raise ValueError(f"unknown scenario {value!r}; known: {', '.join(SCENARIOS)}")
        return value

    @field_validator("target")
    @classmethod
    def _known_target(cls, value: str) -> str:
        if value not in TARGETS:
            raise ValueError(f"unknown target {value!r}; known: {', '.join(TARGETS)}")
        return value

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(scenario, target, init, weights_id)."""
        return self.scenario, self.target, self.init, self.weights_id

    def differences(self, workload: Workload) -> list[str]:
        """Each field where ``workload`` differs from the figure's, as ``field run (published: value)``."""
        ours, theirs = workload.model_dump(), self.workload.model_dump()
        return [f"{name} {ours[name]} (published: {theirs[name]})" for name in theirs if ours[name] != theirs[name]]


class PublishedTable(BaseModel):
    """The whole file: a list of entries, one per key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    expectation: list[PublishedLoss]

    @model_validator(mode="after")
    def _one_per_key(self) -> PublishedTable:
        keys = [entry.key for entry in self.expectation]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise ValueError(f"expectation: more than one entry for {repeated}; keep one per "
                             "(scenario, target, init, weights_id)")
        return self


@functools.cache
def load_published(path: Path = PUBLISHED_FILE) -> PublishedTable:
    """The table in ``path``, validated (read once per path).

    Raises:
        ValueError: the file is not TOML, or an entry is invalid (names the entry's index and field).
    """
    try:
        return PublishedTable.model_validate(tomllib.loads(Path(path).read_text()))
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from None
    except ValidationError as err:
        lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors()]
        raise ValueError(f"{path}: " + "; ".join(lines)) from None


def published_for(scenario: str, target: str, init: str, weights_id: str | None,
                  path: Path = PUBLISHED_FILE) -> PublishedLoss | None:
    """The entry for (scenario, target, init, weights_id); None when there is none or the id is unknown."""
    if weights_id is None:
        return None
    return next((e for e in load_published(path).expectation
                 if e.key == (scenario, target, init, weights_id)), None)


def published_weights_id(scenario: str, target: str, path: Path = PUBLISHED_FILE) -> str | None:
    """The Hub id of the weights the table's figures for ``scenario`` on ``target`` were measured on (one id
    for every init); None when the table has none for them, or more than one id."""
    ids = {e.weights_id for e in load_published(path).expectation if (e.scenario, e.target) == (scenario, target)}
    return ids.pop() if len(ids) == 1 else None


def published_for_job(scenario: str, target: str, init: str, weights_id: str | None, workload: Workload,
                      path: Path = PUBLISHED_FILE) -> PublishedFirstStep | None:
    """What ``job.json`` records of the published figure for a job (None when none applies).

    ``role`` is ``expectation`` for pretrained init run on the figure's workload, else ``beside``
    (random init: the derived value decides; another workload: not comparable, differences listed).
    """
    entry = published_for(scenario, target, init, weights_id, path)
    if entry is None:
        return None
    differences = entry.differences(workload)
    role = "expectation" if init == "pretrained" and not differences else "beside"
    return PublishedFirstStep(first_step_loss=entry.first_step_loss, band=entry.band, source=entry.source,
                              role=role, workload_differences=differences)
