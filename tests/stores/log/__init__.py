"""Tests of the source logs."""
