"""Slurm as the engine of a job on many nodes: the batch script (batch.py), what each node runs (node.py),
submitting, following and cancelling the job (job.py), and a real two-node cluster on loopback for tests and
trials (cluster.py)."""
