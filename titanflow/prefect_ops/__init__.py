"""Prefect operations: the long-lived local server (make server), the temporary server of one CLI run, the deployments
table, the training slot (a Prefect concurrency lease), the Hub token's Secret block."""
