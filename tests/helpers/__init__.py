"""Helpers shared by the tests (importable as ``helpers`` since tests/ is on the path)."""

from pathlib import Path

#: Committed inputs of the tests (tests/fixtures/README.md says where each comes from).
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
