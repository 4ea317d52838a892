"""Judging one run: expected losses, goldens, the loss verdict, regression rules, failure classes and the final verdict."""
