"""Code that the ingest (web) and the worker processes both import."""
