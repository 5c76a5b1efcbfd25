"""Helpers that more than one test folder uses: bounded waits (polling), broker processes, record
batches, logs and clocks for storage-level tests. A helper only one folder uses stays in that folder."""
