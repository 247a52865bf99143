"""The library as a user installs it: its version readable, and only its own command on their PATH."""

import json
import subprocess
from pathlib import Path

from wire import sdk2_python

WHAT_THE_PACKAGE_SAYS = """
import json, mcp_idempotency
from importlib.metadata import distribution
installed = distribution("mcp-idempotency")
print(json.dumps({
    "version": mcp_idempotency.__version__,
    "metadata version": installed.version,
    "scripts": sorted(entry.name for entry in installed.entry_points if entry.group == "console_scripts"),
    "imported from": mcp_idempotency.__file__,
    "files": sorted(str(path) for path in installed.files),
}))
"""


def installed_package() -> dict:
    """What the mcp 2.x environment's installed mcp-idempotency says of itself."""
    ran = subprocess.run([sdk2_python(), "-c", WHAT_THE_PACKAGE_SAYS], capture_output=True, text=True, check=True)
    return json.loads(ran.stdout)


def test_the_package_version_is_importable_and_is_the_one_installed():
    package = installed_package()
    assert package["version"] == package["metadata version"]
    assert package["version"].count(".") == 2, package


def test_the_package_puts_only_its_store_command_on_the_path():
    assert installed_package()["scripts"] == ["mcp-idempotency-store"]


def test_the_package_is_installed_from_its_wheel_with_its_type_marker_and_schema():
    package = installed_package()
    source = Path(__file__).resolve().parent.parent / "idempotency"
    assert not Path(package["imported from"]).resolve().is_relative_to(source), package["imported from"]
    shipped = {path for path in package["files"] if path.startswith("mcp_idempotency/")}
    assert {"mcp_idempotency/py.typed", "mcp_idempotency/stores/postgres_v4.sql"} <= shipped
    assert not [path for path in package["files"] if path.startswith("mcp_idempotency_demo/")]
