"""A bisect (titanflow.bisect.search.BisectResult) as a probe table, markdown, terminal text and the Prefect
artifact ``bisect-<scenario>-<target>-<init>``.

    print(bisect_text(result))                # titanflow bisect
    publish_bisect(result)                    # the flow qwen3-bisect: one artifact version per bisect

The table has one row per probe, in the order they ran: the bad endpoint, the good endpoint, then each revision
git bisect asked for, with its verdict (good, bad, skip), its run's failure class and failed checks, its loss
curve (step 1, step 2 and the last step) and its flow run.
"""

from __future__ import annotations

import pandas as pd
from prefect.artifacts import create_markdown_artifact

from titanflow.bisect.search import BisectResult, Probe
from titanflow.report.artifacts import artifact_key
from titanflow.report.markdown import fenced, markdown_table

#: What each probe role is called in the table.
ROLES = {"bad": "bad endpoint", "good": "good endpoint", "step": "bisect"}


def loss_curve(losses: list[float]) -> str:
    """Step 1, step 2 and the last step's loss (nats, 5 decimals: torchtitan logs 5) and the step count, e.g.
    ``11.94006, 11.93394 ... 11.62677 (10 steps)``; ``-`` when no step was logged."""
    if not losses:
        return "-"
    shown = ", ".join(f"{x:.5f}" for x in losses[:2])
    last = f" ... {losses[-1]:.5f}" if len(losses) > 2 else ""
    return f"{shown}{last} ({len(losses)} step{'s' if len(losses) > 1 else ''})"


def probe_rows(result: BisectResult) -> list[dict]:
    """One row per probe (module docstring)."""
    def row(number: int, p: Probe) -> dict:
        return {"#": number, "revision": p.revision[:12], "subject": p.subject, "probe": ROLES[p.role],
                "verdict": p.verdict, "class": p.failure_class or "", "checks": ", ".join(p.checks),
                "loss curve": loss_curve(p.losses), "s": f"{p.wall_s:.0f}", "flow run": p.flow_run_id or ""}
    return [row(number, p) for number, p in enumerate(result.probes, 1)]


def headline(result: BisectResult) -> str:
    """One line: what the bisect found, or why it did not."""
    what = (f"bisect {result.parameters['scenario']}-{result.parameters['target']}-{result.parameters['init']} "
            f"{result.good[:12]}..{result.bad[:12]} ({result.commits} commits)")
    probes = (f"{result.steps_taken} bisect probe(s) (at most ceil(log2({result.commits})) = {result.steps_bound} "
              f"without skips) + {len(result.probes) - result.steps_taken} endpoint probe(s)")
    if result.status == "found":
        subject = next(p.subject for p in result.probes if p.revision == result.first_bad)
        return f"{what}: first bad commit {result.first_bad[:12]} \"{subject}\" fails {result.check}; {probes}"
    if result.status == "ambiguous":
        return f"{what}: {result.reason}: {', '.join(c[:12] for c in result.candidates)}; {probes}"
    return f"{what}: {result.status}: {result.reason}"


def bisect_markdown(result: BisectResult) -> str:
    """The artifact: headline, the first bad commit's message, the probe table, the git bisect log, the folder."""
    lines = [f"# {headline(result)}", ""]
    if result.first_bad_message is not None:
        lines += [f"First bad commit `{result.first_bad}`:", "", fenced(result.first_bad_message), ""]
    lines += [markdown_table(probe_rows(result)), ""]
    if result.bisect_log:
        lines += ["git bisect log (replay it with `git bisect replay`):", "", fenced(result.bisect_log.rstrip()), ""]
    wall = f"{result.wall_s:.0f} s" if result.wall_s is not None else "unfinished"
    lines.append(f"Wall time {wall}; probes' runs, logs and history in `{result.folder}`.")
    return "\n".join(lines) + "\n"


def bisect_text(result: BisectResult) -> str:
    """The terminal form: headline, the probe table (pandas, without the flow run ids), the first bad commit's
    message and the wall time."""
    table = pd.DataFrame(probe_rows(result)).drop(columns=["flow run"]) if result.probes else pd.DataFrame()
    lines = [headline(result), ""]
    if not table.empty:
        lines += [table.to_string(index=False), ""]
    if result.first_bad_message is not None:
        lines += [f"first bad commit {result.first_bad}:", *(f"    {x}" for x in result.first_bad_message.splitlines()), ""]
    wall = f"{result.wall_s:.0f} s" if result.wall_s is not None else "unfinished"
    lines.append(f"wall time {wall}; folder {result.folder}")
    return "\n".join(lines) + "\n"


def artifact_name(result: BisectResult) -> str:
    """``bisect-<scenario>-<target>-<init>`` in the form Prefect keys require."""
    return f"bisect-{artifact_key(result.parameters)}"


def publish_bisect(result: BisectResult):
    """Publish :func:`bisect_markdown` as the markdown artifact :func:`artifact_name`; returns its id."""
    return create_markdown_artifact(key=artifact_name(result), markdown=bisect_markdown(result),
                                    description=headline(result)[:500])
