"""Tests of ``stores``, one package per subpackage (iqv2, engine, app, log, pipeline)."""
