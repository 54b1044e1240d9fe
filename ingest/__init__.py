"""The thin Flask ingest: verify, record event + job in one transaction, acknowledge."""
