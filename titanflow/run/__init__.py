"""The run: its parameters (ScenarioRun), the checks before compute, the task names and the typed record (summary.json)."""
