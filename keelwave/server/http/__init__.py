"""What every request meets: errors, responses, parameters, authentication, metrics,
health checks, the dashboard and the API document."""
