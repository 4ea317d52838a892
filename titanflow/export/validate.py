"""The export checks, four levels side by side, each timed and reported in summary.json.

1. structure (titanflow.export.structure): index, dtypes and config.json from the safetensors headers;
2. round trip (titanflow.export.roundtrip): HF -> torchtitan -> HF bit-exact, for torchtitan's own models;
3. load (titanflow.export.load): ``transformers.AutoModelForCausalLM`` loads it, keys, tie, forward;
   for a tied checkpoint exported untied (hf_backend), also the walkthrough's own check beside it
   (``walkthrough_tie``: without the trained head, under the tied config, only lm_head.weight missing);
4. parity (titanflow.export.parity): the export's logits against the trained torchtitan model's.

A check that finds a problem records it and the task fails after summary.json has
the report; a check that cannot run at all (a damaged shard, no probe file) fails
the task with its own message, which summary.json keeps as the error.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from titan_cfg.job import Job
from titan_cfg.probe import PROBE_FILE
from titan_cfg.scenarios import SCENARIOS, trained_rope_theta
from titanflow.export.load import check_export, check_tied_as_saved, load_export
from titanflow.export.parity import check_parity, read_probe
from titanflow.export.roundtrip import check_round_trip
from titanflow.export.structure import check_structure
from titanflow.params import Tolerances
from titanflow.results import ValidationReport

#: The levels in report order (ValidationReport.seconds, problems); they run in another (validate_export).
LEVELS = ("structure", "round_trip", "load", "walkthrough_tie", "parity")


def validate_export(export_dir: Path, job: Job, tolerances: Tolerances) -> ValidationReport:
    """Run the four levels (module docstring); raises when a check cannot run at all.

    Memory, so that the peak is about one transformers load of the export and no more: structure reads
    headers only; transformers loads the export once (float32: about its size for a float32 export,
    twice for bfloat16) for the load checks and parity, whose forwards both run on the probe file's ids
    (no tokenizer is loaded); the model is released before the round trip, which imports torchtitan and
    converts one layer's tensors at a time, and before the walkthrough's tie check loads the export again.
    The flow records the task's peak resident set (titanflow.record.summary.RunSummary.task_peak_rss_bytes).

    Raises:
        FileNotFoundError: no probe file in the job's dump folder.
        ValueError: a damaged shard, or logits of another shape than the probe's.
    """
    seconds: dict[str, float] = {}
    start = time.monotonic()
    structure = check_structure(export_dir, job.export_dtype, trained_rope_theta(job))
    seconds["structure"] = round(time.monotonic() - start, 3)
    probe_path = Path(job.dump_folder) / PROBE_FILE
    input_ids = read_probe(probe_path)["input_ids"]
    # What the flow process held before the load (636k objects of torch, transformers and Prefect) is not the
    # load's garbage: frozen, the collection below scans only what the checks made (0.002 s in a native cpu flow,
    # against 0.37 s for a full collection).
    gc.freeze()
    try:
        start = time.monotonic()
        loaded = load_export(export_dir)  # the one load, shared by the load checks and parity
        load = check_export(export_dir, loaded, input_ids)
        seconds["load"] = round(time.monotonic() - start, 3)
        start = time.monotonic()
        parity = check_parity(loaded[0], probe_path)
        seconds["parity"] = round(time.monotonic() - start, 3)
        del loaded
        gc.collect()  # the model's memory goes back before the round trip and the walkthrough's second load
    finally:
        gc.unfreeze()
    round_trip = None
    if SCENARIOS[job.scenario].round_trip:  # the transformers backend keeps HF names: nothing is converted
        start = time.monotonic()
        round_trip = check_round_trip(export_dir, job.shape)
        seconds["round_trip"] = round(time.monotonic() - start, 3)
    walkthrough_tie = None
    if job.tied and not load.tied:  # hf_backend: the export carries the trained head, untied
        start = time.monotonic()
        walkthrough_tie = check_tied_as_saved(export_dir, input_ids)
        seconds["walkthrough_tie"] = round(time.monotonic() - start, 3)
    problems = [f"structure: {p}" for p in structure.problems]
    for what in ("differing", "lost", "gained"):
        if round_trip is not None and getattr(round_trip, what):
            problems.append(f"round trip: tensors {what} after HF -> torchtitan -> HF: {getattr(round_trip, what)[:5]}")
    problems += [f"load: {p}" for p in load.problems]
    problems += [f"walkthrough tie: {p}" for p in walkthrough_tie.problems] if walkthrough_tie else []
    if parity.kl > tolerances.parity_kl or parity.top1_agreement < tolerances.parity_top1:
        problems.append(f"parity: KL {parity.kl:.3g} (max {tolerances.parity_kl:g}), top-1 agreement "
                        f"{parity.top1_agreement:.4f} (min {tolerances.parity_top1:g}) between the trained model "
                        "and its export")
    if parity.router_agreement is not None and parity.router_agreement < tolerances.parity_router:
        problems.append(f"parity: router top-k choices agree on {parity.router_agreement:.4f} of (layer, token) "
                        f"pairs (min {tolerances.parity_router:g}) between the trained model and its export")
    seconds = {level: seconds[level] for level in LEVELS if level in seconds}
    return ValidationReport(structure=structure, round_trip=round_trip, load=load, walkthrough_tie=walkthrough_tie,
                            parity=parity, seconds=seconds, problems=problems)
