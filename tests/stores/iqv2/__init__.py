"""Tests of the IQv2 value model."""
