"""Prefect tasks, one concern per module. Each returns paths and small summaries, never tensors."""
