"""The canary: the nightly's suite on a profile's successor beside the pinned profile (flows/canary.py)."""
