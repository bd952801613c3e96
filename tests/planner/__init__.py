"""Tests of the planner: SQL in, EXPLAIN out fixtures; differential and property tests."""
