"""Serving processes: hosting a pipeline, the supervisor and its serving processes, the HTTP server."""
