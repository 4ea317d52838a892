"""titanflow.export.imports: validate's libraries imported on a thread while training runs; a module that fails to
import is named, never raised there (the check that needs it raises in its own task)."""

import sys

from titan_cfg.scenarios import SCENARIOS
from titanflow.export.imports import MODULES, ROUND_TRIP_MODULES, import_ahead, modules_for


def test_the_checks_libraries_are_imported_on_a_daemon_thread_and_a_failure_is_named():
    thread, failed = import_ahead(modules_for(round_trip=True) + ("titanflow_no_such_module",))
    assert thread.daemon and thread.name == "titanflow-import-ahead"
    thread.join(120)
    assert all(name in sys.modules for name in MODULES + ROUND_TRIP_MODULES)
    assert failed == ["titanflow_no_such_module: ModuleNotFoundError: No module named 'titanflow_no_such_module'"]


def test_torchtitan_is_imported_ahead_only_for_a_scenario_whose_export_makes_the_round_trip():
    # hf_backend keeps transformers' names: its validate never imports torchtitan, so neither does the thread
    ahead = {name: modules_for(s.round_trip) == MODULES + ROUND_TRIP_MODULES for name, s in SCENARIOS.items()}
    assert ahead == {name: s.round_trip for name, s in SCENARIOS.items()}
    assert (ahead["native"], ahead["hf_backend"], ahead["moe"]) == (True, False, True)  # the walkthrough's three


def test_the_round_trip_imports_nothing_the_thread_left_out():
    # what the round trip's model spec imports from torchtitan (titan_cfg.model_spec) is on the thread's list
    import inspect

    from titan_cfg import model_spec

    imported = {line.split()[1] for line in inspect.getsource(model_spec).splitlines()
                if line.strip().startswith("from torchtitan")}
    assert imported and imported <= set(ROUND_TRIP_MODULES)
