"""Benchmarks: scripts that print a table and save JSON under bench/results/ (not run by the tests)."""
