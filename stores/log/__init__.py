"""The source logs a pipeline reads: ``eventlog`` (the embedded partitioned log, a local stand-in for Kafka),
``kafka`` (Kafka itself, on confluent-kafka), both ``source.SourceLog``; ``records`` checks what producers write."""
