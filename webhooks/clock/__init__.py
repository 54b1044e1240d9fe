"""The Procfile's `clock`: periodic tasks (the sweeper of lost wake-ups, retention).
Imports only shared/."""
