"""MCP, both ways: snapshot a live server's tools into a toolset version, and
serve a case's mocked tools as an MCP server that records every call.

Everything here imports the ``mcp`` SDK; the CLI imports these modules inside
its commands only.
"""
