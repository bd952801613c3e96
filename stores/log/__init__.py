"""The source logs a pipeline reads: ``eventlog``, the embedded partitioned log (a local stand-in for Kafka)."""
