"""Routing between iqgate servers (issue 17): membership by heartbeats, per-partition forwarding, the wire codec."""
