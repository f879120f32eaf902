"""numlearn: number-aware training losses for language models (DEL, NTL, DIST2, ...)."""

__version__ = "0.1.0"
