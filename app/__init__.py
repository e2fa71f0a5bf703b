"""ToolLens: measure the five ways an LLM agent fails at using tools."""

# First: with TOOLLENS_PURE_PYTHON set, the compiled modules (setup.py) load from source.
from app import buildinfo as _buildinfo  # noqa: F401

__version__ = "0.1.0"
