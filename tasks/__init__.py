"""Prefect tasks: each a ``@task`` over one function of ``titanflow/`` (retries and retry predicates
declared here, tasks/retry.py). Each returns paths and small typed results, never tensors."""
