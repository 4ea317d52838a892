"""A bisect over environments (titanflow.bisect.env_search.EnvBisectResult) as a headline, the package changes in
the order applied, the probe table, terminal text and the Prefect artifact ``bisect-env-<scenario>-<target>-<init>``.

    print(env_bisect_text(result))            # titanflow bisect --good-env/--bad-env
    publish_env_bisect(result)                # the flow qwen3-bisect-env: one artifact version per bisect

The probe table is the commit bisect's (titanflow.report.bisect), one row per environment probed: ``env-<k>`` (the
good one with the first k changes) in place of a revision, the changes it has in place of a subject.
"""

from __future__ import annotations

import pandas as pd
from prefect.artifacts import create_markdown_artifact

from titanflow.bisect.env_search import EnvBisectResult
from titanflow.report.artifacts import artifact_key
from titanflow.report.bisect import ROLES, loss_curve
from titanflow.report.markdown import markdown_table


def env_probe_rows(result: EnvBisectResult) -> list[dict]:
    """One row per probe: environment, its changes, role, verdict, class, checks, loss curve, seconds, flow run."""
    return [{"#": number, "environment": p.revision, "changes": p.subject, "probe": ROLES[p.role],
             "verdict": p.verdict, "class": p.failure_class or "", "checks": ", ".join(p.checks),
             "loss curve": loss_curve(p.losses), "s": f"{p.wall_s:.0f}", "flow run": p.flow_run_id or ""}
            for number, p in enumerate(result.probes, 1)]


def env_headline(result: EnvBisectResult) -> str:
    """One line: the package and its two versions, or why none was named."""
    parameters = result.parameters
    what = (f"bisect {parameters['scenario']}-{parameters['target']}-{parameters['init']} over environments "
            f"{result.good.label}..{result.bad.label} ({len(result.changes)} package changes)")
    probes = (f"{result.steps_taken} bisect probe(s) (at most ceil(log2({len(result.changes)})) = "
              f"{result.steps_bound} without skips) + {len(result.probes) - result.steps_taken} endpoint(s)")
    if result.status == "found":
        return f"{what}: {result.first_bad} fails {result.check}; {probes}"
    if result.status == "ambiguous":
        return f"{what}: {result.reason}; {probes}"
    return f"{what}: {result.status}: {result.reason}"


def _changes_table(result: EnvBisectResult) -> list[dict]:
    return [{"k": k, "package": c.name, "good": c.before or "(absent)", "bad": c.after or "(absent)"}
            for k, c in enumerate(result.changes, 1)]


def env_bisect_markdown(result: EnvBisectResult) -> str:
    """The artifact: headline, the changes in the order applied, the probe table, the folder."""
    lines = [f"# {env_headline(result)}", ""]
    if result.first_bad is not None:
        lines += [f"The package: **{result.first_bad.name}** {result.first_bad.before or '(absent)'} -> "
                  f"{result.first_bad.after or '(absent)'}", ""]
    lines += ["Changes, in the order applied (dependencies first, then by name):", "",
              markdown_table(_changes_table(result)), ""]
    if result.probes:
        lines += [markdown_table(env_probe_rows(result)), ""]
    wall = f"{result.wall_s:.0f} s" if result.wall_s is not None else "unfinished"
    lines.append(f"Revision `{result.revision}`; wall time {wall}; probes' runs, logs and history in `{result.folder}`.")
    return "\n".join(lines) + "\n"


def env_bisect_text(result: EnvBisectResult) -> str:
    """The terminal form: headline, the changes, the probe table (without the flow run ids), the wall time."""
    lines = [env_headline(result), "", pd.DataFrame(_changes_table(result)).to_string(index=False), ""]
    if result.probes:
        lines += [pd.DataFrame(env_probe_rows(result)).drop(columns=["flow run"]).to_string(index=False), ""]
    wall = f"{result.wall_s:.0f} s" if result.wall_s is not None else "unfinished"
    lines.append(f"wall time {wall}; folder {result.folder}")
    return "\n".join(lines) + "\n"


def env_artifact_name(result: EnvBisectResult) -> str:
    """``bisect-env-<scenario>-<target>-<init>`` in the form Prefect keys require."""
    return f"bisect-env-{artifact_key(result.parameters)}"


def publish_env_bisect(result: EnvBisectResult):
    """Publish :func:`env_bisect_markdown` as the markdown artifact :func:`env_artifact_name`; returns its id."""
    return create_markdown_artifact(key=env_artifact_name(result), markdown=env_bisect_markdown(result),
                                    description=env_headline(result)[:500])
