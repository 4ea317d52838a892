"""One lane of the torchtitan window, run in a Python whose ``PYTHONPATH`` starts with a snapshot's overlay
(tests/upstream/overlays.py): what the installed torchtitan does with each scenario, printed as one JSON object.

    PYTHONPATH=.venv/overlays/torchtitan-<date>-<key> python tests/upstream/lane.py <out dir> [--train s1,s2]
    python tests/upstream/lane.py <out dir> --rows      # only each scenario's loader's first batch (loader_rows)

``{"distribution": [name, version], "window": titan_cfg.window.report(...) for the cpu target, "renders": {scenario:
{"<target>/<mode>": "works" or the refusal}}, "trained": {scenario: {"losses": ..., "install": ...} or the error},
"rows": {scenario: {mode: the loader's first batch}} on a Grain base (else {})}``: every scenario rendered
for the cpu and trn2 targets in the default and the walkthrough mode (``model_spec`` "config", "walkthrough"), files
only, as ``titanflow render`` does; each scenario of ``--train`` trained in the walkthrough mode on one rank for 2
steps on the cpu target (the embedded tiny model, random init), as the flow's train task launches it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from titan_cfg import first_batch
from titan_cfg.scenarios import SCENARIOS
from titan_cfg.window import INSTALL_FILE, WindowError, report
from titanflow.launch.render import RenderError, render
from titanflow.launch.torchrun import TrainingError, run_training
from titanflow.params import ScenarioRun
from titanflow.run.checks import torchtitan_distribution
from titanflow.run.pretrained import embedded_weights

TARGETS = ("cpu", "trn2")
MODES = ("config", "walkthrough")
#: The training of a lane: what an assertion on the golden's leading steps needs, on one rank.
TRAIN = {"steps": 2, "nproc_per_node": 1, "model_spec": "walkthrough"}


def renders(out: Path) -> dict:
    """``{scenario: {"<target>/<mode>": "works" | "<refusal>"}}`` of every scenario, files only, into ``out``."""
    found = {}
    for scenario in SCENARIOS:
        weights = embedded_weights("random", SCENARIOS[scenario].model_type)
        for target in TARGETS:
            for mode in MODES:
                run = ScenarioRun(scenario=scenario, target=target, model_spec=mode)
                try:
                    render(run, weights, out / f"{scenario}-{target}-{mode}", files_only=True)
                    found.setdefault(scenario, {})[f"{target}/{mode}"] = "works"
                except (RenderError, WindowError) as err:
                    found.setdefault(scenario, {})[f"{target}/{mode}"] = f"{type(err).__name__}: {err}"
    return found


def train(scenario: str, out: Path) -> dict | str:
    """``{"losses": per-step losses, "install": what rank 0 recorded of the torchtitan it trained with
    (titan_cfg.window.record_install), "loader_positions": whether its data loader yielded per-document positions,
    "first_batch": the path of step 1's record (titan_cfg.first_batch)}`` of :data:`TRAIN` for ``scenario``, or the
    error's text."""
    run = ScenarioRun(scenario=scenario, target="cpu", **TRAIN)
    weights = embedded_weights("random", SCENARIOS[scenario].model_type)
    try:
        result = run_training(render(run, weights, out / f"train-{scenario}"), timeout_s=900)
    except (TrainingError, RenderError, WindowError) as err:
        return f"{type(err).__name__}: {err}"[-2000:]
    dump_folder = out / f"train-{scenario}" / "train"
    first = torch.load(first_batch.rank_file(dump_folder, 0), weights_only=True)
    return {"losses": result.losses, "install": json.loads((dump_folder / INSTALL_FILE).read_text()),
            "loader_positions": first["loader_positions"],
            "first_batch": str(first_batch.rank_file(dump_folder, 0))}


def loader_rows(scenario: str, mode: str, out: Path) -> str:
    """The path of a ``.pt`` file, ``{"input": [B, L], "labels": [B, L], "positions": [B, L] (where the batch has
    them)}`` int64: the first batch the installed torchtitan's data loader gives :data:`TRAIN`'s job of ``scenario``
    in the model-spec ``mode`` (one rank), in rows (titan_cfg.token_rows), built in this process without a model:
    what a training of it would record as step 1's batch (titan_cfg.first_batch)."""
    from titan_cfg import forms, token_rows, trainer_config
    from titan_cfg.compat.cpu import make_importable_without_triton
    from titan_cfg.job import Job

    make_importable_without_triton()
    run = ScenarioRun(scenario=scenario, target="cpu", **{**TRAIN, "model_spec": mode})
    rendered = render(run, embedded_weights("random", SCENARIOS[scenario].model_type), out / f"rows-{scenario}-{mode}")
    config = trainer_config.build(Job.read(Path(rendered.job_path)))
    tokenizer = config.tokenizer.build(tokenizer_path=config.hf_assets_path)
    seq_len, batch = forms.seq_len(config.training), forms.local_batch_size(config.training)
    sizes = ({"max_context_length": seq_len, "num_tokens_per_batch": batch * seq_len} if forms.token_major()
             else {"seq_len": seq_len, "local_batch_size": batch})
    inputs, labels = next(iter(config.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=tokenizer, **sizes)))
    path = out / f"rows-{scenario}-{mode}.pt"
    torch.save({key: token_rows.as_rows(tensor, seq_len) for key, tensor in
                (("input", inputs["input"]), ("labels", labels), ("positions", inputs.get("positions")))
                if tensor is not None}, path)
    return str(path)


def all_rows(out: Path) -> dict:
    """``{scenario: {mode: loader_rows(...)}}`` for every scenario in both modes."""
    return {s: {mode: loader_rows(s, mode, out) for mode in MODES} for s in SCENARIOS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", default="")
    parser.add_argument("--rows", action="store_true", help="only each scenario's loader's first batch in both "
                        "modes (all_rows)")
    args = parser.parse_args()
    if args.rows:
        print(json.dumps({"rows": all_rows(args.out)}))
        return
    found = report("cpu", "cpu", tuple(SCENARIOS))
    result = {"distribution": torchtitan_distribution(), "window": found, "renders": renders(args.out),
              "trained": {s: train(s, args.out) for s in filter(None, args.train.split(","))},
              # on a Grain base the loader is titanflow's own (titan_cfg.grain_loader): its rows are held to 0.3.0's
              "rows": all_rows(args.out) if found["present"]["grain"] else {}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
