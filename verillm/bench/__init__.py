"""Benchmarks and calibration: scripts that print a table and write JSON (never timed tests)."""
