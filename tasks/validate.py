"""validate: check the export at three levels, each part timed and reported in summary.json.

1. structure: index, dtypes and config.json from the safetensors headers
   (titanflow.structure), then the load in ``transformers.AutoModelForCausalLM`` (below);
2. round trip (titanflow.roundtrip): HF -> torchtitan -> HF bit-exact, for the native scenario;
3. parity (titanflow.parity): the export's logits against the trained torchtitan model's.

A check that finds a problem records it and the task fails after summary.json has
the report; a check that cannot run at all (a damaged shard, no probe file) fails
the task with its own message, which summary.json keeps as the error.

The load checks:
- keys: the model's state-dict keys absent from the safetensors files are exactly
  ``{lm_head.weight}`` for a tied model and nothing for an untied one (an MoE's experts,
  fused in memory by transformers 5.x, are compared as the per-expert keys they load from);
  transformers reports nothing missing (a missing key would be randomly
  initialised), nothing unexpected, nothing mismatched in shape;
- tie: with ``tie_word_embeddings`` the loaded ``lm_head.weight`` is the embedding matrix;
- forward: one forward pass on a fixed sentence gives finite logits.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger
from pydantic import BaseModel

from titan_cfg.job import Job
from titan_cfg.model_spec import read_config, rope_theta_of
from titan_cfg.probe import PROBE_FILE, PROBE_TEXT
from titan_cfg.scenarios import SCENARIOS
from titanflow.params import Tolerances
from titanflow.parity import ParityReport, check_parity
from titanflow.roundtrip import RoundTripReport, check_round_trip
from titanflow.structure import StructureReport, check_structure, read_headers


class ValidationError(RuntimeError):
    """The export failed a check; the message lists every failed check."""


class LoadReport(BaseModel):
    """Outcome of loading the export in transformers; ``problems`` lists each failed check in words."""

    missing_in_files: list[str]
    missing: list[str]       # transformers' missing_keys (randomly initialised on load)
    unexpected: list[str]
    mismatched: list[str]
    tied: bool               # config.json tie_word_embeddings
    lm_head_is_embedding: bool | None  # tied models only
    forward_finite: bool
    problems: list[str]


def load_export(export_dir: Path):
    """(model, loading info) of ``AutoModelForCausalLM.from_pretrained`` on the export, fp32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(export_dir, output_loading_info=True, dtype=torch.float32)


def check_export(export_dir: Path, loaded=None) -> LoadReport:
    """Run the load checks above on ``loaded`` (from :func:`load_export`; loaded here when None)."""
    import torch
    from transformers import AutoTokenizer

    model, info = loaded or load_export(export_dir)
    tied = bool(model.config.tie_word_embeddings)
    in_files = {name for tensors in read_headers(export_dir).values() for name in tensors}
    missing_in_files = sorted(checkpoint_keys(model) - in_files)
    expected_absent = ["lm_head.weight"] if tied else []
    problems = []
    if missing_in_files != expected_absent:
        problems.append(f"keys absent from the files {missing_in_files}, expected {expected_absent}")
    for name in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info[name]:
            problems.append(f"transformers {name}: {sorted(map(str, info[name]))}")
    lm_head_is_embedding = None
    if tied:
        embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        lm_head_is_embedding = bool(head.data_ptr() == embed.data_ptr() or torch.equal(head, embed))
        if not lm_head_is_embedding:
            problems.append("tie_word_embeddings is true but lm_head differs from embed_tokens after load")
    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    ids = tokenizer(PROBE_TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    forward_finite = bool(torch.isfinite(logits).all())
    if not forward_finite:
        problems.append("forward pass on the probe sentence gave non-finite logits")
    return LoadReport(
        missing_in_files=missing_in_files,
        missing=sorted(info["missing_keys"]),
        unexpected=sorted(info["unexpected_keys"]),
        mismatched=sorted(map(str, info["mismatched_keys"])),
        tied=tied,
        lm_head_is_embedding=lm_head_is_embedding,
        forward_finite=forward_finite,
        problems=problems,
    )


def checkpoint_keys(model) -> set[str]:
    """The checkpoint keys ``model``'s state dict is loaded from: its own keys, except those transformers
    builds by merging checkpoint tensors (its conversion mapping for the model_type, e.g. Qwen3 MoE's
    ``mlp.experts.gate_up_proj`` [E, 2F, D] from ``mlp.experts.{e}.gate_proj/up_proj.weight``), which
    are replaced by their sources, ``*`` taking every expert index 0..num_experts-1."""
    from transformers.conversion_mapping import WeightConverter, get_checkpoint_conversion_mapping

    converters = [c for c in get_checkpoint_conversion_mapping(model.config.model_type) or []
                  if isinstance(c, WeightConverter)]
    experts = range(getattr(model.config, "num_experts", 0) or 0)
    keys = set()
    for key in model.state_dict():
        converter = next((c for c in converters for t in c.target_patterns if key.endswith(t)), None)
        if converter is None:
            keys.add(key)
            continue
        prefix = key[: -len(next(t for t in converter.target_patterns if key.endswith(t)))]
        keys |= {prefix + source.replace("*", str(e)) for source in converter.source_patterns for e in experts}
    return keys


class ValidationReport(LoadReport):
    """All three levels: the load checks' fields, the structure, round-trip and parity
    reports, seconds per check, and every problem found."""

    structure: StructureReport
    round_trip: RoundTripReport | None  # None: the scenario has no torchtitan <-> HF conversion to test
    parity: ParityReport | None
    seconds: dict[str, float]

    def raise_for_problems(self) -> None:
        """Raises :class:`ValidationError` listing every failed check, if any failed."""
        if self.problems:
            raise ValidationError("validate: " + "; ".join(self.problems))


def validate_export(export_dir: Path, job: Job, tolerances: Tolerances) -> ValidationReport:
    """Run the three levels (module docstring); raises when a check cannot run at all."""
    seconds: dict[str, float] = {}
    start = time.monotonic()
    trained_theta = rope_theta_of(read_config(Path(job.weights_dir)))
    structure = check_structure(export_dir, job.export_dtype, trained_theta)
    seconds["structure"] = round(time.monotonic() - start, 3)
    problems = [f"structure: {p}" for p in structure.problems]
    round_trip = None
    if SCENARIOS[job.scenario].round_trip:  # the transformers backend keeps HF names: nothing is converted
        start = time.monotonic()
        round_trip = check_round_trip(export_dir, Path(job.weights_dir))
        seconds["round_trip"] = round(time.monotonic() - start, 3)
        for what in ("differing", "lost", "gained"):
            if getattr(round_trip, what):
                problems.append(f"round trip: tensors {what} after HF -> torchtitan -> HF: "
                                f"{getattr(round_trip, what)[:5]}")
    start = time.monotonic()
    loaded = load_export(export_dir)
    load = check_export(export_dir, loaded)
    seconds["load"] = round(time.monotonic() - start, 3)
    problems += [f"load: {p}" for p in load.problems]
    start = time.monotonic()
    parity = check_parity(loaded[0], Path(job.dump_folder) / PROBE_FILE)
    seconds["parity"] = round(time.monotonic() - start, 3)
    if parity.kl > tolerances.parity_kl or parity.top1_agreement < tolerances.parity_top1:
        problems.append(f"parity: KL {parity.kl:.3g} (max {tolerances.parity_kl:g}), top-1 agreement "
                        f"{parity.top1_agreement:.4f} (min {tolerances.parity_top1:g}) between the trained model "
                        "and its export")
    if parity.router_agreement is not None and parity.router_agreement < tolerances.parity_router:
        problems.append(f"parity: router top-k choices agree on {parity.router_agreement:.4f} of (layer, token) "
                        f"pairs (min {tolerances.parity_router:g}) between the trained model and its export")
    return ValidationReport(**{**load.model_dump(), "problems": problems}, structure=structure,
                            round_trip=round_trip, parity=parity, seconds=seconds)


@task(name="validate")
def validate(export_dir: str, job_path: str, tolerances: Tolerances) -> ValidationReport:
    """Prefect task: :func:`validate_export`, logged. The flow records the report, then
    calls :meth:`ValidationReport.raise_for_problems`, so a failed check is in summary.json."""
    report = validate_export(Path(export_dir), Job.read(Path(job_path)), tolerances)
    get_run_logger().info("validation: %s", report.model_dump_json())
    return report
