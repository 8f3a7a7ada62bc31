"""The data lifecycle's API: deleting runs, and a project's retention period."""
