"""What titanflow doctor asks of the installed torchtitan, in a Python of its own (it imports torch and torchtitan):
the window's report (titan_cfg.window.report: the names each scenario takes, the changes that block it, where the
install sits) and, for a rendered job, whether this torchtitan builds the job's ``Trainer.Config``, which is where a
dependency no name shows (an attribute of a config, a keyword of a builder) fails.

    python -m titan_cfg.install_probe '{"target_node": "trn2", "device": "neuron", "scenarios": ["native"],
                                        "job": "/tmp/.../job.json"}'

prints one JSON object: the report, and ``"config"``: None (no job given, or its scenario is blocked, which the
report says), ``"built"``, or ``"<exception type>: <message>"``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from titan_cfg.job import Job
from titan_cfg.trainer_config import build
from titan_cfg.window import report


def probe(target_node: str, device: str, scenarios: list[str], job: str | None = None) -> dict:
    """:func:`titan_cfg.window.report` for ``scenarios``, and whether the job at ``job`` (a job.json path) builds
    (module docstring)."""
    found = report(target_node, device, tuple(scenarios))
    found["config"] = None
    if job is not None:
        rendered = Job.read(Path(job))
        row = found["scenarios"].get(rendered.scenario)
        if row is not None and not row["refusals"]:  # a blocked scenario would only be refused again
            try:
                build(rendered)
                found["config"] = "built"
            except Exception as err:  # noqa: BLE001 - whatever torchtitan raises is the answer
                found["config"] = f"{type(err).__name__}: {err}"
    return found


if __name__ == "__main__":
    print(json.dumps(probe(**json.loads(sys.argv[1]))))
