"""The HTTP server: ingest API, query API, and (later) the dashboard on one origin."""
