"""The site's Slurm settings titanflow submits with, from the environment of the process that submits (the
worker on the cluster's login node: its shell, or the work pool's ``env`` job variable).

| variable | sbatch option | default |
|---|---|---|
| ``TITANFLOW_SLURM_PARTITION`` | ``--partition`` | the cluster's default partition |
| ``TITANFLOW_SLURM_ACCOUNT`` | ``--account`` | none |
| ``TITANFLOW_SLURM_SBATCH_ARGS`` | any further options, as a shell would split them (e.g. ``--qos=high``) | none |
| ``SLURM_CONF`` | (Slurm's own) the cluster's slurm.conf the commands read | Slurm's built-in path |
"""

from __future__ import annotations

import os
import shlex

from pydantic import BaseModel, Field

PARTITION_ENV, ACCOUNT_ENV, SBATCH_ARGS_ENV = "TITANFLOW_SLURM_PARTITION", "TITANFLOW_SLURM_ACCOUNT", \
    "TITANFLOW_SLURM_SBATCH_ARGS"


class SlurmSettings(BaseModel):
    """Where and as whom a job is submitted (module docstring)."""

    partition: str | None = Field(None, description="sbatch --partition; None: the cluster's default")
    account: str | None = Field(None, description="sbatch --account; None: the user's default")
    extra: list[str] = Field([], description="further sbatch options, one argument each")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "SlurmSettings":
        """The settings the variables of ``env`` (default: this process's) give.

        Raises:
            ValueError: ``TITANFLOW_SLURM_SBATCH_ARGS`` is not shell-splittable (an open quote), naming it.
        """
        env = os.environ if env is None else env
        try:
            extra = shlex.split(env.get(SBATCH_ARGS_ENV, ""))
        except ValueError as err:
            raise ValueError(f"{SBATCH_ARGS_ENV}: {err}; give sbatch options as a shell would read them") from None
        return cls(partition=env.get(PARTITION_ENV) or None, account=env.get(ACCOUNT_ENV) or None, extra=extra)

    def options(self) -> list[str]:
        """The sbatch options these settings add."""
        return ([f"--partition={self.partition}"] if self.partition else []) + (
            [f"--account={self.account}"] if self.account else []) + self.extra
