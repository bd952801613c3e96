"""Tests of the app facade: the client state machine, IQv2 acceptance tables, handles, readers, processes."""
