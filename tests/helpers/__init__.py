"""Builders and fixtures shared by the tests, imported as ``tests.helpers.<topic>``; a directory's
conftest.py imports the fixtures its tests use."""
