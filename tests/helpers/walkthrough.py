"""The walkthrough's published figures as the tests expect them ("Train Qwen3 on AWS Trainium with torchtitan"): its
fine-tuned weights and scenario 1's workload (c4_test, 64 ranks x 1 sequence x 2048 tokens)."""

from titan_cfg.published import Workload

INSTRUCT = "Qwen/Qwen3-4B-Instruct-2507"
WALKTHROUGH = Workload(dataset="c4_test", world_size=64, local_batch_size=1, seq_len=2048)
