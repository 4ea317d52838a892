"""The trends mark the night a workload's installed stack changed (the history's stack_digest), and the report names
the packages from both runs' summary.json stacks (titanflow.judge.trends, titanflow.report.trends)."""

import pandas as pd
from helpers.history_rows import history_row

from titanflow.judge.trends import trend_table
from titanflow.record.summary import RunSummary
from titanflow.report.trends import name_stack_changes, trend_text

OLD = {"distributions": {"neuronx-cc": "2.21.0", "torch-neuronx": "2.14.3", "torch": "2.14.0"}, "digest": "aaaa1111"}
NEW = {"distributions": {"neuronx-cc": "2.22.1", "torch-neuronx": "2.14.3", "torch": "2.14.0"}, "digest": "bbbb2222"}


def test_the_night_the_stack_changed_is_marked_with_the_packages(tmp_path):
    rows = []
    for day, stack in ((1, OLD), (2, OLD), (3, NEW)):
        folder = tmp_path / f"night-{day}"
        folder.mkdir()
        (folder / "summary.json").write_text(RunSummary(run_id=folder.name, scenario="native", target="cpu",
                                                        init="random", steps=10, stack=stack).model_dump_json())
        rows.append(history_row(folder.name, day, run_dir=str(folder), stack_digest=stack["digest"]))
    runs = pd.DataFrame(rows)
    table = trend_table(runs, nights=14)
    assert list(table["stack"]) == ["", "", "stack aaaa1111 -> bbbb2222"]
    assert table["stack_changed_from"].isna().tolist() == [True, True, False]
    assert table["stack_changed_from"].iloc[-1] == "night-2"
    named = name_stack_changes(table, runs)
    assert named["stack"].iloc[-1] == "1 package(s) changed: neuronx-cc 2.21.0 -> 2.22.1"
    assert "1 package(s) changed: neuronx-cc 2.21.0 -> 2.22.1" in trend_text(named).splitlines()[-2]
