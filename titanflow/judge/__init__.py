"""Judging: expected losses, goldens, the loss verdict, regression rules, the run history, failure classes and the final verdict."""
