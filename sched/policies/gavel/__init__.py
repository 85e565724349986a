"""Gavel (OSDI'20): ``policy`` (the ``gavel`` policy's rounds) and ``lp`` (the linear programs of its
allocation, §3.1, §4.1-§4.2)."""
