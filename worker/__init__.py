"""The Procfile's `worker`: Dramatiq actors that apply jobs (handlers, in the job's
transaction) and dispatch outbox emails through Postmark. Imports only shared/."""
