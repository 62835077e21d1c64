"""Midtown: the Python SDK and the `midtown` command."""
