"""What agents send: request schemas, the fingerprint of record, model prices, and the
ingest routes that hand validated rows to the store."""
