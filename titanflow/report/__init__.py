"""Reporting: the run's markdown, its Prefect artifacts (progress, metrics, findings, summary) and the loss-curve plot."""
