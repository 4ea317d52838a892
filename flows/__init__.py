"""Prefect flows: thin wiring of the tasks. No torch or torchtitan import at module level
(``prefect deploy`` imports these modules)."""
