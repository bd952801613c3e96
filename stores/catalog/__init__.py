"""What a store is and where a key lives.

``schema``: StoreSpec (kind, key and value columns with SQL types, partitions,
source topics), the catalog entry the planner plans against and the engine
stores; ``partitioner``: Kafka's murmur2 partitioner, shared by the log, the
store writer and the planner so all three put a key in the same partition.
"""
