"""Tests of the gateway: the engine and its faces over real stores."""
