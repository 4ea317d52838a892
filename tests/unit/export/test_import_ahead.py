"""titanflow.export.imports: validate's libraries imported on a thread while training runs; a module that fails to
import is named, never raised there (the check that needs it raises in its own task)."""

import sys

from titanflow.export.imports import MODULES, import_ahead


def test_the_checks_libraries_are_imported_on_a_daemon_thread_and_a_failure_is_named():
    thread, failed = import_ahead(MODULES + ("titanflow_no_such_module",))
    assert thread.daemon and thread.name == "titanflow-import-ahead"
    thread.join(120)
    assert all(name in sys.modules for name in MODULES)
    assert failed == ["titanflow_no_such_module: ModuleNotFoundError: No module named 'titanflow_no_such_module'"]
