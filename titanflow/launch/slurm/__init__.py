"""Slurm as the engine of a job on many nodes: the batch script (batch.py), submitting, following and cancelling
the job (job.py; each node runs titanflow.launch.node), and a real two-node cluster on loopback for tests and
trials (cluster.py)."""
