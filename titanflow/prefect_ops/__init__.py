"""Prefect operations: the long-lived local server (make server), the temporary server of one CLI run, the deployments table."""
