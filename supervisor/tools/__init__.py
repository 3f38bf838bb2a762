"""Tools the gateway runs itself for a model: web search and fetch, MCP servers."""
