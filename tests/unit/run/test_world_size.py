"""Nodes x ranks per node: ScenarioRun's nnodes and nproc_per_node, the world size and scheduler they give, the
checks on them, and the workload key that does not care how the ranks are spread over nodes."""

import pytest

from titan_cfg.targets import TARGETS, Target
from titanflow.judge.workload import config_key, world_size_asked
from titanflow.params import ScenarioRun


def test_world_size_is_nodes_times_ranks_per_node_and_many_nodes_run_on_slurm():
    one = ScenarioRun()
    assert (one.nnodes_resolved, one.nproc_per_node_resolved, one.world_size, one.scheduler_resolved) == (1, 2, 2, "local")
    two = ScenarioRun(nnodes=2, nproc_per_node=1)
    assert (two.world_size, two.global_batch_size_resolved, two.scheduler_resolved) == (2, 4, "slurm")
    cluster = ScenarioRun(target="trn2-cluster")
    assert (cluster.nnodes_resolved, cluster.nproc_per_node_resolved, cluster.world_size) == (2, 64, 128)
    assert (cluster.global_batch_size_resolved, cluster.scheduler_resolved) == (128, "slurm")
    assert cluster.kernels_resolved == ScenarioRun(target="trn2").kernels_resolved  # trn2's per-node tables


def test_the_nproc_keyword_is_the_ranks_per_node():
    """titanflow doctor passes its --nproc as ``nproc``."""
    given = ScenarioRun.model_validate({"scenario": "native", "target": "cpu", "nproc": 1})
    assert (given.nproc_per_node, given.world_size) == (1, 1) and "nproc" not in given.model_dump()


@pytest.mark.parametrize(("given", "message"), [
    ({"nnodes": 3, "nproc_per_node": 1}, "nproc_per_node: world size 3 .3 node.s. x 1. does not divide global_batch_size 4"),
    ({"target": "trn2-cluster", "nnodes": 4}, "nnodes: world size 256 .4 node.s. x 64. does not divide global_batch_size 128"),
    # the field named is the one given: a batch alone (the cpu target's 2 ranks), and the next multiple as the fix
    ({"global_batch_size": 3}, "global_batch_size: world size 2 .1 node.s. x 2. does not divide global_batch_size 3; "
                               "fix: .*--global-batch-size 2 or 4"),
    ({"target": "trn2-cluster", "nproc_per_node": 128, "global_batch_size": 256},
     "nproc_per_node: 128 ranks on a node, but a trn2-cluster node has 64"),
    ({"scenario": "hf_backend", "nnodes": 2, "nproc_per_node": 1}, "nproc_per_node: hf_backend on cpu runs on at most 1"),
    ({"nnodes": 0}, "nnodes"),
])
def test_nodes_and_ranks_the_target_cannot_run_are_refused_naming_the_field(given, message):
    with pytest.raises(ValueError, match=message):
        ScenarioRun(**given)


def test_a_target_of_many_nodes_must_be_scheduled_by_slurm():
    with pytest.raises(ValueError, match="2 nodes need scheduler=.slurm. or .kubernetes."):
        Target(name="x", device="cpu", nnodes=2, nproc_per_node=1, global_batch_size=2, seq_len=16, kernels={}, env={})
    assert TARGETS["trn2-cluster"]().missing_runtime() is None  # its nodes run it, not the submitting machine


def test_the_workload_key_follows_the_world_size_not_its_spread_over_nodes():
    """The golden native cpu curve was recorded with nproc null (the target's 2 ranks): 2 nodes x 1 rank is the
    same workload and finds it (same key), 1 node x 1 rank is another."""
    base = {"scenario": "native", "target": "cpu", "steps": 10, "weights": None, "global_batch_size": None,
            "seq_len": None, "compile": False}
    golden = base | {"nproc": None}
    assert world_size_asked(base | {"nnodes": 2, "nproc_per_node": 1}) is None
    assert config_key(base | {"nnodes": 2, "nproc_per_node": 1}) == config_key(golden) == config_key(
        base | {"nnodes": 1, "nproc_per_node": 2})
    assert world_size_asked(base | {"nproc_per_node": 1}) == 1
    assert config_key(base | {"nproc_per_node": 1}) == config_key(base | {"nproc": 1}) != config_key(golden)
