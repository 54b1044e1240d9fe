"""The `webhooks` command, the composition root: the one package that may import every
process's package (to start it), the embedded servers of `webhooks dev` and the tests,
the `send` client, and the migrations (`webhooks migrate`, the Procfile's `release`)."""
