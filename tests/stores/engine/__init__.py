"""Tests of the storage engine: batch writes, properties, failures as data."""
