"""The text a job trains on, by name, and where it is found (recorded in job.json and summary.json).

- ``botchan``: *Botchan* (public domain), committed in torchtitan's ``c4_test`` layout under
  ``assets/botchan_c4/`` (titanflow.assets.botchan). The cpu and cuda targets train on it.
- ``c4_test``: torchtitan's own ``tests/assets/c4_test`` split, which the AWS walkthrough trains on
  (trn2). It is not part of the installed package: torchtitan's loader reads it relative to the
  working directory of a torchtitan checkout (``hf_datasets/text_datasets.py``:
  ``DATASETS["c4_test"]`` has ``path="tests/assets/c4_test"``). Found, first hit:

  1. ``$TITANFLOW_C4_TEST``: a folder (for a fork installed without its checkout);
  2. the checkout the importable ``torchtitan`` package sits in: ``<checkout>/torchtitan/`` ->
     ``<checkout>/tests/assets/c4_test`` (the walkthrough clones the fork and installs it from there).
     The package is located with ``importlib.util.find_spec``, which imports nothing.

  Where neither holds it (this machine: torchtitan 0.3.0 from a wheel, no tests/ beside it), the
  location where it was looked for is recorded with ``present`` false; a launch refuses it
  (titanflow.launch.render), a files-only render records it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from pydantic import BaseModel, Field

from titanflow import paths
from titanflow.assets.botchan import DATASET_NAME

#: Environment variable naming the c4_test folder explicitly.
C4_TEST_ENV = "TITANFLOW_C4_TEST"
#: Where c4_test lies inside a torchtitan checkout (torchtitan's DATASETS["c4_test"].path).
C4_TEST_IN_CHECKOUT = Path("tests") / "assets" / "c4_test"
#: The committed Botchan text.
BOTCHAN_DIR = paths.SHIPPED_ASSETS / DATASET_NAME

#: Dataset names a target may choose (titan_cfg.targets.Target.dataset).
DATASETS = ("botchan", "c4_test")


class DatasetLocation(BaseModel):
    """A dataset by name, the folder that holds it, how that folder was found, and whether it is there."""

    name: str = Field(description="botchan | c4_test")
    path: str = Field(description="absolute folder in torchtitan's c4_test layout")
    located_by: str = Field(description="how the folder was found, in words")
    present: bool = Field(description="the folder exists and holds a data file")


def torchtitan_checkout() -> Path | None:
    """The folder the importable ``torchtitan`` package sits in (its checkout, for an editable or source
    install; site-packages for a wheel); None when torchtitan is not importable. Imports nothing."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent


def _has_data(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("*.json*"))


def locate(name: str) -> DatasetLocation:
    """Where dataset ``name`` is (module docstring).

    Raises:
        ValueError: an unknown name (lists the known ones).
    """
    if name == "botchan":
        return DatasetLocation(name=name, path=str(BOTCHAN_DIR), located_by="committed with titanflow",
                               present=_has_data(BOTCHAN_DIR))
    if name != "c4_test":
        raise ValueError(f"dataset: unknown {name!r}; known: {', '.join(DATASETS)}")
    if os.environ.get(C4_TEST_ENV):
        folder = Path(os.environ[C4_TEST_ENV]).expanduser().resolve()
        return DatasetLocation(name=name, path=str(folder), located_by=f"${C4_TEST_ENV}", present=_has_data(folder))
    checkout = torchtitan_checkout()
    if checkout is None:
        return DatasetLocation(name=name, path=str(C4_TEST_IN_CHECKOUT), located_by="torchtitan is not importable; "
                               f"set ${C4_TEST_ENV}", present=False)
    folder = checkout / C4_TEST_IN_CHECKOUT
    return DatasetLocation(name=name, path=str(folder), present=_has_data(folder),
                           located_by=f"beside the imported torchtitan package ({checkout / 'torchtitan'}): "
                                      f"<checkout>/{C4_TEST_IN_CHECKOUT}")
