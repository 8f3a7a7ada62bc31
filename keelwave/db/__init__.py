"""Everything that talks to PostgreSQL outside the request path: the embedded
server, migrations, and key management. The server and the CLI both use it."""
