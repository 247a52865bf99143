"""server.py, the 1.x reference, as a module: sections 2 and 3 call its own functions in process."""

import importlib.util
import sys
from pathlib import Path


def load_server(path: str | Path):
    """Import the 1.x server script as a module: it builds its FastMCP object, it does not serve."""
    spec = importlib.util.spec_from_file_location("server_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module
