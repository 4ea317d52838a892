"""torchrun's failure report as a launcher prints it, for tests of the root cause (titanflow.launch.root_cause) of
launches that failed in ways a test cannot make happen on demand (a race between ranks or between nodes)."""

#: torchrun's traceback for a rank killed by SIGKILL (tests/fixtures/failure_logs/ranks_killed, a real launch).
KILLED = "Signal 9 (SIGKILL) received by PID 20117"
#: What gloo raises in a rank whose peer died (the start of ranks_killed's rank 0 error.json).
LOST_PEER = "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"


def child_failed_report(first: tuple[int, str], others: list[tuple[int, str]]) -> str:
    """torchrun's failure report (torch 2.13's ChildFailedError layout, as the launcher prints it) of one node whose
    local ranks are the global ones: ``first`` the first observed failure, ``others`` the rest, each (rank, the
    first line of its traceback)."""

    def entry(index: int, rank: int, traceback: str) -> str:
        return (f"[{index}]:\n  time      : 2026-12-02_02:36:08\n  host      : localhost\n"
                f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : 1 (pid: {100 + rank})\n"
                f"  error_file: <N/A>\n  traceback : {traceback}\n")
    listed = "".join(entry(i + 1, rank, tb) for i, (rank, tb) in enumerate(others)) or "  <NO_OTHER_FAILURES>\n"
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 54 + "\n"
            "run_script_path FAILED\n" + "-" * 54 + f"\nFailures:\n{listed}" + "-" * 54 +
            "\nRoot Cause (first observed failure):\n" + entry(0, *first) + "=" * 54 + "\n")
