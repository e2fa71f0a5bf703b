"""ToolLens: measure the five ways an LLM agent fails at using tools."""

__version__ = "0.1.0"
