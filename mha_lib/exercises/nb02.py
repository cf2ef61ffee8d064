"""Checkers for notebook 02."""

__all__: list[str] = []
