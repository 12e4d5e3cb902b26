"""Benchmark cases of bench.py: one module per op (its docstring says what a case module defines)."""
