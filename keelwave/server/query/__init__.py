"""The read API: runs, their steps, loops and model calls; aggregates; tool statistics."""
