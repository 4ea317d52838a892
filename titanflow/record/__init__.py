"""What runs leave behind: the run record (summary.json), the history of runs, and runs compared with each other."""
