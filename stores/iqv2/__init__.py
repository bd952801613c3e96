"""The IQv2 value model (KIP-796 and its follow-ups), in Python spelling: no I/O, nothing else of ours.

``position`` (Position, PositionBound), ``query`` (KeyQuery … MultiVersionedKeyQuery),
``request`` (StateQueryRequest), ``result`` (QueryResult, StateQueryResult, FailureReason),
``values`` (ValueAndTimestamp, VersionedRecord, KeyValue, Windowed), ``errors`` (KIP-216, KIP-662),
``state`` (KIP-696's client states and KIP-671's handler responses), ``timeutil`` (epoch ms).
"""
