"""The service's infrastructure, apart from its domain: settings and secrets, server paths and the
results layout, errors, names, job statuses, log redaction, the one-server lock, replicas, backup,
metrics and the documentation pages. Nothing here knows a job's tasks, costs or standings."""
