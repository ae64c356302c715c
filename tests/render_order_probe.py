"""Stands in for triton in tests/test_worker_order.py: a module that must be imported before any environment."""
