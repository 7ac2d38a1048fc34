"""memroute: memory-augmented confidence routing for persistent AI agents.

The package is pure Python and never imports Ray; see docs/ARCHITECTURE.md.
"""

__version__ = "0.1.0"
