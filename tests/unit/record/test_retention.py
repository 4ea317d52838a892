"""titanflow prune (titanflow.record.retention): a runs folder of 20 runs (passed, failed, cancelled, in progress, one
a node baseline was promoted from, one not titanflow's) against the committed policy (retention.toml: failed kept 14
days, the newest 5 passing runs of a workload, records 180 days): the dry run lists what goes with its bytes, --apply
frees exactly those bytes, and what the policy keeps is left byte for byte."""

from helpers.history_rows import history_row
from helpers.run_folders import CHECKPOINT_BYTES, EXPORT_BYTES, LOG_BYTES, NOW, make_run

from titanflow.cli import main
from titanflow.judge import baselines
from titanflow.record import retention


def test_twenty_runs_keep_what_the_policy_says_and_free_the_bytes_the_dry_run_printed(tmp_path, capsys):
    runs, history = tmp_path / "runs", tmp_path / "history"
    passing = [make_run(runs, f"pass-{i:02d}", "pass", days_ago=i) for i in range(8)]  # newest first
    other_workload = make_run(runs, "pass-20-steps", "pass", days_ago=30, steps=20)  # the newest of its own workload
    failed_recent = [make_run(runs, f"fail-recent-{i}", "fail", days_ago=1 + i) for i in range(3)]
    failed_old = [make_run(runs, f"fail-old-{i}", "fail", days_ago=20 + i) for i in range(3)]
    cancelled_old = make_run(runs, "cancelled-old", "cancelled", days_ago=15)
    ancient = make_run(runs, "pass-ancient", "pass", days_ago=200)
    in_progress = make_run(runs, "in-progress", None, days_ago=40)
    promoted = make_run(runs, "pass-promoted", "pass", days_ago=100)
    stray = runs / "not-a-run"
    stray.mkdir()
    (stray / "notes.txt").write_text("kept")
    elsewhere = make_run(tmp_path / "elsewhere", "old-run-elsewhere", "pass", days_ago=300)
    (runs / "linked-run").symlink_to(elsewhere)  # a link to a run folder outside: not this folder's to prune
    assert len([p for p in runs.iterdir() if (p / "summary.json").exists() and not p.is_symlink()]) == 19  # + stray
    baselines.promote(history_row("pass-promoted", 1, hardware="cpu: AMD EPYC, AVX512"), {}, "first night", history)

    decisions = {d.run_dir.name: d for d in retention.plan(runs, history_dir=history, now=NOW)}
    heavy = {f.name for f in [*passing[5:], *failed_old, cancelled_old]}
    assert {name for name, d in decisions.items() if d.action == "heavy"} == heavy
    assert {name for name, d in decisions.items() if d.action == "whole"} == {"pass-ancient"}
    kept = {f.name for f in [*passing[:5], other_workload, *failed_recent, in_progress, promoted]}
    assert {name for name, d in decisions.items() if d.action == "keep"} == kept
    assert "not-a-run" not in decisions and "linked-run" not in decisions
    expected = len(heavy) * (EXPORT_BYTES + CHECKPOINT_BYTES) + (EXPORT_BYTES + CHECKPOINT_BYTES + LOG_BYTES
                                                                 + (ancient / "summary.json").stat().st_size)

    assert main(["prune", "--runs-dir", str(runs), "--history-dir", str(history)]) == 0
    dry = capsys.readouterr().out.splitlines()
    assert dry[-1] == (f"prune: would free {expected:,} bytes ({expected / 2**10:.2f} KiB) from 8 of 19 runs of "
                       f"{runs}; 11 kept whole; titanflow prune --apply --runs-dir {runs} --history-dir {history} "
                       "removes it")
    assert dry[0] == (f"would remove {(EXPORT_BYTES + CHECKPOINT_BYTES) / 2**10:.2f} KiB of cancelled-old: export, "
                      "train/checkpoint (cancelled, past the policy: its export and step checkpoints go)")
    assert all((f / "export").exists() for f in passing)  # a dry run removes nothing
    assert main(["prune", "--apply", "--runs-dir", str(runs), "--history-dir", str(history)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"prune: freed {expected:,} bytes")
    for name in heavy:  # the heavy parts went, the records and logs stayed
        assert not (runs / name / "export").exists() and not (runs / name / "train" / "checkpoint").exists()
        assert (runs / name / "summary.json").exists() and (runs / name / "train.log").exists()
    assert not ancient.exists() and stray.exists() and (elsewhere / "export").exists()
    for name in kept:
        assert (runs / name / "export" / "model.safetensors").stat().st_size == EXPORT_BYTES
        assert (runs / name / "train" / "checkpoint" / "step-10" / "__0_0.distcp").exists()


def test_prune_refuses_a_runs_or_history_folder_that_is_not_one(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    assert main(["prune", "--runs-dir", str(tmp_path / "missing"), "--history-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines()[1] == (f"runs_dir: {tmp_path / 'missing'} is not there; fix: pass "
                                                      "the runs folder (--runs-dir)")
    assert main(["prune", "--apply", "--runs-dir", str(tmp_path), "--history-dir", str(tmp_path / "a-file")]) == 2
    assert capsys.readouterr().err.splitlines()[1].startswith(f"history_dir: {tmp_path / 'a-file'} is a file; fix: ")


def test_an_export_hard_linked_to_its_checkpoint_is_counted_once_and_only_when_both_links_go(tmp_path):
    """The export's safetensors is a hard link of the last step checkpoint's (titanflow.export.assemble), as a real
    run folder has it: removing the export and the checkpoints frees the file once; a link that stays frees nothing."""
    import os

    runs = tmp_path / "runs"
    old = [make_run(runs, f"pass-{i:02d}", "pass", days_ago=i) for i in range(7)]  # the two oldest lose their heavy parts
    for run in old:
        shared = run / "train" / "checkpoint" / "step-10" / "model-00001-of-00001.safetensors"
        os.link(run / "export" / "model.safetensors", shared)
    decisions = {d.run_dir.name: d for d in retention.plan(runs, history_dir=tmp_path / "history", now=NOW)}
    assert decisions["pass-05"].bytes == decisions["pass-06"].bytes == EXPORT_BYTES + CHECKPOINT_BYTES
    # the export alone, its checkpoint twin left in place: the disk gets nothing back
    kept_twin = retention._freed((old[6] / "export",))
    assert kept_twin == 0 and retention._freed((old[6] / "train" / "checkpoint",)) == CHECKPOINT_BYTES
    assert retention.apply([decisions["pass-05"]]) == EXPORT_BYTES + CHECKPOINT_BYTES


def test_a_bisects_probes_and_a_canarys_runs_keep_everything_14_days_then_lose_their_heavy_parts(tmp_path, capsys):
    """The runs inside a bisect's folder (``bisect-*/runs/``) and a canary's (``canary-*/<role>/runs/``) belong to no
    workload's newest runs: each keeps everything failed_keep_days (14), then its export and step checkpoints go,
    and it goes whole after records_keep_days (180); the dry run names each by its path in the runs folder."""
    runs = tmp_path / "runs"
    recent = make_run(runs / "canary-cpu-lowest-cpu-20261205-050000-ab12" / "successor" / "runs", "native-succ", "pass",
                      days_ago=2)
    probe = make_run(runs / "bisect-native-cpu-random-20261120-1" / "runs", "native-cpu-random-env-1", "fail",
                     days_ago=20)
    ancient = make_run(runs / "bisect-native-cpu-random-20260501-1" / "runs", "native-cpu-random-env-0", "pass",
                       days_ago=200)
    (tmp_path / "history").mkdir()
    decisions = {d.run_dir.name: d for d in retention.plan(runs, history_dir=tmp_path / "history", now=NOW)}
    assert decisions[recent.name].action == "keep" and decisions[recent.name].why == "a canary's run, kept 14 days"
    assert (decisions[probe.name].action, decisions[probe.name].bytes) == ("heavy", EXPORT_BYTES + CHECKPOINT_BYTES)
    assert decisions[ancient.name].action == "whole"
    assert main(["prune", "--runs-dir", str(runs), "--history-dir", str(tmp_path / "history")]) == 0
    assert (f"would remove {(EXPORT_BYTES + CHECKPOINT_BYTES) / 2**10:.2f} KiB of bisect-native-cpu-random-20261120-1/"
            "runs/native-cpu-random-env-1: export, train/checkpoint (a bisect's probe, 20 days old: its export and step "
            "checkpoints go)") in capsys.readouterr().out
