"""The MCP server of openaiagents.py's ``mcp`` mode: get_weather over stdio (FastMCP)."""

from mcp.server.fastmcp import FastMCP

server = FastMCP("weather")


@server.tool()
def get_weather(city: str, unit: str = "celsius") -> str:
    """Current weather for a city."""
    return f"18 degrees {unit} in {city}"


if __name__ == "__main__":
    server.run("stdio")
