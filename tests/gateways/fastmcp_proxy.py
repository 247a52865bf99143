"""fastmcp's proxy (`create_proxy`) in front of a server over Streamable HTTP, served over Streamable HTTP itself.

    python fastmcp_proxy.py http://127.0.0.1:PORT/mcp --port FRONT_PORT

Run by the interpreter of the environment tests/gateways/fastmcp.txt pins; the proxy is fastmcp's own, unchanged.
"""

import argparse

from fastmcp.server import create_proxy


def main() -> None:
    """Proxy the server at the URL given, on 127.0.0.1 at --port, path /mcp."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("url", help="the server behind the proxy")
    parser.add_argument("--port", type=int, required=True, help="where the proxy listens")
    options = parser.parse_args()
    create_proxy(options.url, name="gateway").run(
        transport="http", host="127.0.0.1", port=options.port, show_banner=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
