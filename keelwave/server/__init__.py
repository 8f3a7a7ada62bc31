"""The HTTP server: ingest API, query API and the dashboard, on one origin.

The packages follow the data:

- ``http/``   what every request meets: errors, responses, parameters, keys and
              scopes, metrics, health checks, the dashboard, the API document;
- ``ingest/`` what agents send: request schemas, the fingerprint of record,
              model prices, and the routes that hand rows to the store;
- ``store/``  how rows reach PostgreSQL: the group-commit writer and its lanes,
              the SQL statements, rollups and histograms, finishing runs and the
              reaper. It knows nothing of HTTP (no aiohttp);
- ``query/``  what the dashboard, CLI and TUI read: runs, loops, aggregates, tools.

``app.py`` wires them into one aiohttp application. ``ingest`` and ``query``
never import each other: what both need lives in ``http``, ``store`` or
``keelwave.protocol``.
"""
