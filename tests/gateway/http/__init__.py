"""Tests of the HTTP face over a real server on 127.0.0.1."""
