"""Install profiles: what a node runs titanflow with, one function each (read them side by side).

A profile is the folder ``profiles/<name>/`` (its Python in ``.python-version``, its pinned stack in
``constraints.txt``) and the command that installs it; a target names the profile its nodes run
(:attr:`titan_cfg.targets.Target.profile`). The record says how a node gets the profile, whether a Prefect work
pool can install it before each flow run (a pull step, titanflow.prefect_ops.deployments), and the fixes titanflow
doctor names when a node lacks part of it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """An install profile: ``profiles/<name>/`` and how a node gets it.

    ``command``: the make command that installs it, from the repository root (``make setup``); ``install``: the fix
    that names it, where a check finds the profile's stack missing or at another version (the command, what it runs
    and where); ``pull_step``: a work pool's pull step may run ``command`` before each flow run
    (:meth:`pull_script`): it is idempotent, takes the runs' scenarios as ``SCENARIOS=...`` and ends with titanflow
    doctor for them, so a node that cannot run them fails before any task.

    The fixes titanflow doctor names, each a ``str.format`` template: ``python_fix``, this interpreter is not the
    profile's Python (``{python}``: the profile's ``major.minor``); ``upstream_fix``, the torch and torchtitan names
    titanflow takes do not resolve (``{fork}``: the version of the torchtitan fork the trn2 profile installs);
    ``kernel_fix``, a registered kernel's modules do not import (``{modules}``: those modules, comma-separated).
    """

    name: str
    command: str
    install: str
    python_fix: str
    upstream_fix: str
    kernel_fix: str
    pull_step: bool = False

    def pull_script(self, scenarios: tuple[str, ...]) -> str:
        """The script of the pull step that installs the profile and has titanflow doctor check the runs of
        ``scenarios`` (their weights: titan_cfg.scenarios.ON_NODE): ``make setup-trn2 SCENARIOS=moe``; several are
        quoted as one word (Prefect splits the script as a shell would, shlex).

        Raises:
            ValueError: the profile has no pull step (``pull_step`` False).
        """
        if not self.pull_step:
            raise ValueError(f"the {self.name} install profile has no pull step ({self.command} takes no scenarios); "
                             "fix: install=False on its work pools")
        return f"{self.command} SCENARIOS={scenarios[0]}" if len(scenarios) == 1 else (
            f'{self.command} "SCENARIOS={" ".join(scenarios)}"')


def cpu() -> Profile:
    """CI, laptops: ``.venv`` made by ``make setup`` with the CPU build of torch (profiles/cpu). No pull step: a
    machine's venv is made once, and its worker runs from it (``make server``)."""
    return Profile(
        name="cpu",
        command="make setup",
        install="make setup",
        python_fix="make setup (creates .venv with Python {python})",
        upstream_fix="install the torch and torchtitan of the target's profile (make setup)",
        kernel_fix="install {modules}",
    )


def trn2() -> Profile:
    """The walkthrough's stack in the Neuron 2.33 DLAMI's own venv, titanflow on top (profiles/trn2/setup.sh:
    torch-neuronx, the torchtitan-neuron fork, nkilib; it ends with titanflow doctor --target trn2)."""
    command = "make setup-trn2"
    install = f"{command} (profiles/trn2/setup.sh) on the Neuron 2.33 DLAMI"
    return Profile(
        name="trn2",
        command=command,
        install=install,
        python_fix=install + " (its venv is Python {python})",
        upstream_fix=install + " (the fork {fork}, torch-neuronx and nkilib)",
        kernel_fix=install + " (torch-neuronx, neuronx-cc with nki and nkilib)",
        pull_step=True,
    )


PROFILES = {"cpu": cpu, "trn2": trn2}
