"""Lowest layer: errors, clocks, atomic file writes, invariants. Imports nothing from orbitmq."""
