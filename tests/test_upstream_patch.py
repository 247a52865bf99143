"""The upstream patch (upstream/python-sdk/idempotency-extension.patch) applies to the mcp 2.3.0 release, passes
the SDK's own client and server suites, and the library runs on the SDK it makes with no workaround.

One test, in steps that each fail with what went wrong: the release's source distribution from the package index
(CI reaches PyPI and no other network), the patch applied with `git apply`, an environment with the patched SDK,
the test tools the sdist's own lockfile pins, this library and the demos; then the SDK's `tests/client` and
`tests/server` (where the patch's own tests live), and this project's placement and client tests with that
environment as their 2.x interpreter. About three and a half minutes on 2 cores, half of it the SDK's 2,178 tests.
"""

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCH = ROOT / "upstream" / "python-sdk" / "idempotency-extension.patch"
RELEASE = "2.3.0"
# What the SDK's client and server suites import beyond the SDK itself (its `dev` group, narrowed to those
# suites), at the versions the sdist's uv.lock pins.
TEST_TOOLS = [
    "pytest",
    "pytest-xdist",
    "pytest-examples",
    "inline-snapshot",
    "dirty-equals",
    "trio",
    "logfire",
    "opentelemetry-sdk",
    "blockbuster",
]
SDK_SUITES = ["tests/client", "tests/server"]
# The SDK's one test that expects an unreadable file to be unreadable: root reads every file, so as root it
# cannot pass on a pristine sdist either.
NEEDS_NON_ROOT = "tests/server/mcpserver/resources/test_file_resources.py::test_permission_error"
PROJECT_TESTS = ["tests/test_placement.py", "tests/test_client.py"]


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`command` run to its end in `cwd`, its output kept for the failure message."""
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def tail(ran: subprocess.CompletedProcess[str]) -> str:
    """The last of a command's output, where pip and pytest say what failed."""
    return (ran.stdout + ran.stderr)[-4000:]


def downloaded_sdist(folder: Path) -> Path:
    """The mcp release's source distribution from the package index, unpacked in `folder`; its root."""
    download = [sys.executable, "-m", "pip", "download", "-q", f"mcp=={RELEASE}"]
    ran = run([*download, "--no-binary", ":all:", "--no-deps", "-d", str(folder)], folder)
    assert ran.returncode == 0, f"could not download the mcp {RELEASE} sdist:\n{tail(ran)}"
    (archive,) = folder.glob("mcp-*.tar.gz")
    with tarfile.open(archive) as unpacked:
        unpacked.extractall(folder, filter="data")
    root = folder / f"mcp-{RELEASE}"
    assert f"\nVersion: {RELEASE}\n" in (root / "PKG-INFO").read_text(), "the sdist is not the release patched"
    assert (root / "tests" / "client").is_dir(), "the sdist holds no tests/: nothing to run the patch against"
    return root


def apply_patch(sdk: Path) -> None:
    """The patch applied to the unpacked sdist, or a failure that says it no longer applies."""
    checked = run(["git", "apply", "--check", str(PATCH)], sdk)
    assert checked.returncode == 0, f"{PATCH.name} does not apply to mcp {RELEASE}:\n{tail(checked)}"
    assert run(["git", "apply", str(PATCH)], sdk).returncode == 0
    assert (sdk / "tests" / "server" / "test_idempotency.py").exists(), "the patch brought no tests of its own"


def pinned_test_tools(sdk: Path) -> list[str]:
    """TEST_TOOLS at the versions the sdist's uv.lock pins (read as text: tomllib is not in Python 3.10)."""
    lockfile = (sdk / "uv.lock").read_text()
    pins = {name: re.search(rf'\nname = "{name}"\nversion = "([^"]+)"', lockfile) for name in TEST_TOOLS}
    assert all(pins.values()), f"the sdist's uv.lock pins none of {[name for name, pin in pins.items() if not pin]}"
    return [f"{name}=={pin[1]}" for name, pin in pins.items() if pin]


def patched_environment(sdk: Path, folder: Path) -> Path:
    """A virtual environment with the patched SDK, its test tools, the library and the demos; its python."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    # One resolution: the SDK named by its folder, so no other mcp can satisfy the library's `mcp>=2.3`.
    install = [str(python), "-m", "pip", "install", "-q", str(sdk), *pinned_test_tools(sdk)]
    ran = run([*install, str(ROOT / "idempotency") + "[postgres,auth]", str(ROOT / "demos")], ROOT)
    assert ran.returncode == 0, f"could not install the patched SDK with the library:\n{tail(ran)}"
    return python


def sdk_suites(python: Path, sdk: Path) -> subprocess.CompletedProcess[str]:
    """The SDK's client and server suites on the patched SDK, in two processes, as its maintainers run them."""
    deselected = ["--deselect", NEEDS_NON_ROOT] if os.geteuid() == 0 else []
    return run([str(python), "-m", "pytest", *SDK_SUITES, "-q", "-n", "2", "-p", "no:cacheprovider", *deselected], sdk)


def project_tests(python: Path) -> subprocess.CompletedProcess[str]:
    """This project's 2.x placement and client tests, the patched environment as their 2.x interpreter."""
    env = {**os.environ, "SEP3182_SDK2_PYTHON": str(python)}
    return run([sys.executable, "-m", "pytest", *PROJECT_TESTS, "-q", "-m", "not slow", "-n", "0"], ROOT, env)


@pytest.mark.slow
@pytest.mark.timeout(600)  # a download, an environment, and some three thousand SDK tests on two cores
def test_patch_applies_to_the_release_passes_the_sdk_suites_and_carries_the_library(tmp_path):
    sdk = downloaded_sdist(tmp_path)
    apply_patch(sdk)
    python = patched_environment(sdk, tmp_path / "venv")
    suites = sdk_suites(python, sdk)
    assert suites.returncode == 0, f"the SDK's suites fail on the patched SDK:\n{tail(suites)}"
    ours = project_tests(python)
    assert ours.returncode == 0, f"the library's tests fail on the patched SDK:\n{tail(ours)}"
