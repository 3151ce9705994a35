"""From an HTTP request to stored results: the API (`api/`), the job store (`store/`), execution
(`runner/`), schedules and the leaderboard; `core/` holds the infrastructure they stand on."""
