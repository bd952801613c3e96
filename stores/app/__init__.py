"""The Kafka Streams client facade over the stores.

``streams``: StreamsApp (KIP-696 state machine, KIP-671 handler, IQv2 ``query``);
``handles``: the classic IQv1 read-only views; ``reader``: StateDirReader, the same
queries over another process's store files; ``dispatch``: the per-partition fan-out
both share; ``lifecycle``, ``assignment``, ``coordination``: the FSM, which partitions
an instance hosts, SHUTDOWN_APPLICATION across processes; ``layout``: where files live
under a state directory; ``protocol``: the contracts with the pipeline and the gateway.
"""
