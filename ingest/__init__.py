"""The Procfile's `web`: the thin Flask ingest. Verify, record event + job in one
transaction, acknowledge, wake a worker. Imports only shared/; loads no worker code."""
