"""What a run's steps return, typed: the records ``summary.json`` is made of, on a floor of their own.

The compile warm-up's and training's results (produced by titanflow.launch.warmup and titanflow.launch.torchrun),
the export's and its four checks' reports (titanflow.export.assemble, titanflow.export.validate), and what judging
gives (titanflow.judge): the first-step loss verdict, regression findings, failure classes and the run's one
:data:`Verdict`. The producers and every reader (record, report, bisect, run) import them from here, so reading a
run record loads pydantic and titan_cfg only: never pandas, Prefect or torch.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from titan_cfg.job import PublishedFirstStep

#: Every verdict a run can end with (None: not judged yet; titanflow.judge.verdict.final_verdict).
Verdict = Literal["pass", "fail", "cancelled"]

#: The outcome of one check, the first-step loss's: it passed or it failed (a check is never cancelled).
LossOutcome = Literal["pass", "fail"]

#: Why a run failed; the order is the order of the checks on a root cause (titanflow.judge.failures).
FailureClass = Literal["input", "checkpoint", "environment", "disk_full", "out_of_memory", "infrastructure", "compile",
                       "numerics", "export_validation", "performance"]

#: A rule's class: a failure class (the loss curve's is numerics; throughput, memory and time are performance, which
#: fails a run only beyond its margin on consecutive runs: titanflow.judge.regression).
FindingClass = FailureClass

#: How a finding came out; "no baseline" and "no value": nothing could be compared; "flagged": a performance rule
#: beyond its margin on fewer consecutive runs than fail the run (titanflow.judge.regression), said, not failed.
Status = Literal["pass", "fail", "flagged", "no baseline", "no value"]


class IndependentLoss(BaseModel):
    """transformers' cross-entropy of the loaded weights on the trainer's step-1 batch."""

    loss: float = Field(description="sum of token cross-entropies / valid tokens, all ranks (nats)")
    tokens: int = Field(description="valid (not ignored) label tokens over all ranks")
    forwards: int = Field(description="forward passes run (documents, or rows without a document mask)")
    ranks: int = Field(description="rank files read")
    seconds: float = Field(description="wall seconds of load and forwards")


class LossVerdict(BaseModel):
    """The first-step loss against its expectation."""

    first_step_loss: float = Field(description="loss of step 1 (nats), rank 0")
    expected_first_step_loss: float = Field(description="what step 1 should give (nats)")
    tolerance: float = Field(description="allowed |measured - expected| (nats); 0 for a one-sided bound")
    expectation_source: str = Field(description="where the expectation comes from (formula, golden file)")
    verdict: LossOutcome = Field(description="pass or fail of this check")
    reason: str = Field(description="the comparison in numbers")
    independent: IndependentLoss | None = Field(
        None, description="pretrained init: transformers' loss of the loaded weights on the step-1 batch, "
        "when the target computes it (then it is the expectation)")
    golden_first_step_loss: float | None = Field(
        None, description="the golden's step 1 (nats), reported beside the independent expectation")
    published: PublishedFirstStep | None = Field(
        None, description="the published first-step loss for the job's weights (titan_cfg.published): "
        "the expectation (role expectation) or reported beside it")


class Finding(BaseModel):
    """One rule checked on one run: ``value`` against ``baseline`` within ``margin``.

    ``passed`` is None when nothing could be compared (status "no baseline" or "no value"); False for a "fail" and
    a "flagged" one (out of margin; only "fail" fails the run). ``streak``: a performance rule out of margin, the
    consecutive runs of the workload out of it, this one included, against those that fail the run ("1 of 2").
    """

    model_config = ConfigDict(populate_by_name=True)

    metric: str
    value: float | None
    baseline: float | None
    margin: float
    passed: bool | None
    status: Status
    finding_class: FindingClass = Field(alias="class")
    detail: str
    streak: str | None = None

    def as_record(self) -> dict[str, Any]:
        """A flat dict (key ``class``) for a table artifact or a DataFrame row."""
        return self.model_dump(by_alias=True)


class WarmupResult(BaseModel):
    """What the warm-up did."""

    status: Literal["skipped", "reused", "warmed"] = Field(description="compile off / cache already warm / warmed now")
    reason: str = Field(description="why, in words")
    seconds: float = Field(description="wall seconds of the one-step compile run (0 unless warmed)")
    cache_dir: str | None = Field(description="the keyed compile-cache folder, when the job compiles")
    eager: bool = Field(False, description="compile is off: what is warmed, if anything, is the block-mask builder only "
                        "(compiles_when_eager)")

    def from_cache(self) -> WarmupResult:
        """This result as a later run of the same job gets it from Prefect's cache (titanflow.tasks.warmup): it
        compiled nothing, so a ``warmed`` result reads ``reused`` and 0 s, its reason kept."""
        if self.status != "warmed":
            return self
        return self.model_copy(update={"status": "reused", "seconds": 0.0,
                                       "reason": f"Prefect's cache: an earlier run of this job warmed it ({self.reason})"})


class TrainResult(BaseModel):
    """Summary of a finished training launch. A field marked ``"metric": True`` is a column of the history
    (titanflow.history_row) that a regression rule may judge."""

    log_path: str | None = Field(description="runs/<id>/train.log, rank 0")
    metrics_path: str | None = Field(description="runs/<id>/metrics.csv (titanflow.launch.metrics.COLUMNS: step, "
                                     "loss, grad_norm, memory_gib, tps, tflops, mfu_pct, step_time_s)")
    losses: list[float] = Field(description="loss per step (nats), step 1 first, rank 0: every step once, from "
                                "the last launch that trained it")
    tokens_per_s: float = Field(description="all ranks: median per-rank tokens/s over steps >= 2, times world size",
                                 json_schema_extra={"metric": True})
    peak_memory_gib: float = Field(description="largest per-rank peak memory torchtitan reported (GiB)",
                                    json_schema_extra={"metric": True})
    peak_rss_bytes: int = Field(description="largest resident set of any process of the launch (bytes)",
                                json_schema_extra={"metric": True})
    step_time_s: float | None = Field(None, description="median seconds per step over steps >= 2 (torchtitan's "
                                      "time_metrics/end_to_end(s)); None: the console line was the source (it "
                                      "has no step time), or a summary written before it", json_schema_extra={"metric": True})
    mfu_pct: float | None = Field(None, description="median model FLOPs utilization over steps >= 2, % of the peak "
                                  "torchtitan assumes for the device (an A100's 312 TFLOPs on a cpu); None: none logged, "
                                  "or a summary written before it", json_schema_extra={"metric": True})
    metrics_source: str | None = Field(None, description="where the step metrics came from: \"tensorboard\" "
                                       "(torchtitan's event files, float32 as written) or \"console line: <why>\" "
                                       "(rank 0's step lines, rounded as printed; titanflow.launch.event_files); None: "
                                       "a summary written before it")
    wall_s: float = Field(description="seconds from launch to exit (the last launch)")
    resumed_from_step: int | None = Field(None, description="step of the step checkpoint the last launch resumed "
                                          "from (titanflow.launch.resume); None: it started at step 1")
    attempts: int | None = Field(None, description="launches of this run's training, the last included (a retry "
                                 "relaunches); None: a summary written before launches were counted")
    set_aside: list[str] = Field(default_factory=list, description="damaged step checkpoints the last launch set "
                                 "aside before it resumed, each as where it went and why (titanflow.launch.resume)")


def non_finite_steps(losses: list[float] | None) -> list[int]:
    """1-based steps whose loss is NaN or infinite (or missing)."""
    return [i for i, x in enumerate(losses or [], 1) if x is None or not math.isfinite(float(x))]


class ExportResult(BaseModel):
    """Where the export is, and whether training untied a tied checkpoint's lm_head."""

    export_dir: str = Field(description="the complete Hugging Face folder, runs/<id>/export")
    untied_lm_head: bool = Field(description="training untied a tied checkpoint's lm_head; the export carries "
                                 "the trained head, untied")


class StructureReport(BaseModel):
    """Counts read from the headers, and ``problems`` (each a sentence naming the file or field)
    (titanflow.export.structure)."""

    tensors: int
    shards: int
    dtypes: dict[str, int]   # header dtype code -> number of tensors
    problems: list[str]


class RoundTripReport(BaseModel):
    """Tensors compared, and the keys that did not come back identical, went missing or appeared
    (titanflow.export.roundtrip)."""

    tensors: int
    differing: list[str]
    lost: list[str]
    gained: list[str]


class LoadReport(BaseModel):
    """Outcome of loading the export in transformers; ``problems`` lists each failed check in words
    (titanflow.export.load)."""

    missing_in_files: list[str] = Field(description="state-dict keys of the loaded model absent from the files")
    missing: list[str] = Field(description="transformers' missing_keys (randomly initialised on load)")
    unexpected: list[str] = Field(description="transformers' unexpected_keys")
    mismatched: list[str] = Field(description="transformers' mismatched_keys (shape differs)")
    tied: bool = Field(description="config.json tie_word_embeddings")
    lm_head_is_embedding: bool | None = Field(description="tied models only: lm_head is the embedding after load")
    forward_finite: bool = Field(description="one forward on the probe sentence gave finite logits")
    problems: list[str] = Field(description="each failed load check, in words")


class ParityReport(BaseModel):
    """KL(trained || export) in nats per token (mean over positions), top-1 agreement (fraction),
    and the largest absolute logit difference, on ``tokens`` probe positions. For an MoE,
    ``router_agreement`` is the fraction of (layer, token) pairs whose top-k expert set is the
    same in both models, over ``router_layers`` layers (None for a dense model). An MoE trained with expert-bias
    load balancing is compared as it routes without that bias (titan_cfg.probe), and
    ``expert_bias_router_agreement`` is the fraction of pairs whose experts the trained model, with its bias,
    chose as the export does (None without a bias): what the export gives up of the trained routing
    (titanflow.export.parity)."""

    kl: float
    top1_agreement: float
    max_abs_logit_diff: float
    tokens: int
    router_agreement: float | None = None
    router_layers: int = 0
    expert_bias_router_agreement: float | None = None


class ExportCheckError(RuntimeError):
    """The export failed a check; the message lists every failed check."""


class ValidationReport(BaseModel):
    """The four levels' reports, seconds per check, and every problem found."""

    structure: StructureReport = Field(description="level 1: safetensors headers, index, dtypes, config.json")
    round_trip: RoundTripReport | None = Field(
        description="level 2; None: the scenario has no torchtitan <-> HF conversion to test")
    load: LoadReport = Field(description="level 3: the load in transformers")
    walkthrough_tie: LoadReport | None = Field(
        None, description="level 3 as the walkthrough checks a tied checkpoint's export: without the trained "
        "head, under the tied config.json, only lm_head.weight missing and tied to the embedding; None unless "
        "the checkpoint is tied and its export untied (then `load` is the untied export's)")
    parity: ParityReport | None = Field(description="level 4: export against the trained model")
    seconds: dict[str, float] = Field(description="wall seconds per level")
    problems: list[str] = Field(description="every failed check of every level, prefixed by its level")

    def raise_for_problems(self) -> None:
        """Raises :class:`ExportCheckError` listing every failed check, if any failed."""
        if self.problems:
            raise ExportCheckError("validate: " + "; ".join(self.problems))
