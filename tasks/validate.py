"""validate: load the export with ``transformers.AutoModelForCausalLM`` and check it.

Checks (each reported in summary.json):
- keys: the model's state-dict keys absent from the safetensors files are exactly
  ``{lm_head.weight}`` for a tied model and nothing for an untied one;
  transformers reports nothing missing (a missing key would be randomly
  initialised), nothing unexpected, nothing mismatched in shape;
- tie: with ``tie_word_embeddings`` the loaded ``lm_head.weight`` is the embedding matrix;
- forward: one forward pass on a fixed sentence gives finite logits.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task
from prefect.logging import get_run_logger
from pydantic import BaseModel

#: The fixed input of the forward check (real text, tokenised with the export's tokenizer).
PROBE_TEXT = "It was a fine spring morning when I left Tokyo for the school in the country."


class ValidationError(RuntimeError):
    """The export failed a check; the message lists every failed check."""


class ValidationReport(BaseModel):
    """Outcome of the export checks; ``problems`` lists each failed check in words."""

    missing_in_files: list[str]
    missing: list[str]       # transformers' missing_keys (randomly initialised on load)
    unexpected: list[str]
    mismatched: list[str]
    tied: bool               # config.json tie_word_embeddings
    lm_head_is_embedding: bool | None  # tied models only
    forward_finite: bool
    problems: list[str]

    @property
    def passed(self) -> bool:
        return not self.problems

    def raise_for_problems(self) -> None:
        """Raises :class:`ValidationError` listing every failed check, if any failed."""
        if self.problems:
            raise ValidationError("validate: " + "; ".join(self.problems))


def keys_in_files(export_dir: Path) -> set[str]:
    """Tensor names listed by the export's safetensors index (or single file's header)."""
    index = export_dir / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    from safetensors import safe_open

    with safe_open(export_dir / "model.safetensors", "pt") as f:
        return set(f.keys())


def check_export(export_dir: Path) -> ValidationReport:
    """Load ``export_dir`` in transformers (fp32, CPU) and run the checks above."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(export_dir, output_loading_info=True, dtype=torch.float32)
    tied = bool(model.config.tie_word_embeddings)
    missing_in_files = sorted(set(model.state_dict()) - keys_in_files(export_dir))
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
    return ValidationReport(
        missing_in_files=missing_in_files,
        missing=sorted(info["missing_keys"]),
        unexpected=sorted(info["unexpected_keys"]),
        mismatched=sorted(map(str, info["mismatched_keys"])),
        tied=tied,
        lm_head_is_embedding=lm_head_is_embedding,
        forward_finite=forward_finite,
        problems=problems,
    )


@task(name="validate")
def validate(export_dir: str) -> ValidationReport:
    """Prefect task: :func:`check_export`, logged. The flow records the report, then
    calls :meth:`ValidationReport.raise_for_problems`, so a failed check is in summary.json."""
    report = check_export(Path(export_dir))
    get_run_logger().info("validation: %s", report.model_dump_json())
    return report
