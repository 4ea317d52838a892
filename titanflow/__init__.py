"""titanflow: Qwen3 training scenarios on torchtitan, run and judged as Prefect flows."""

__version__ = "0.1.0"
