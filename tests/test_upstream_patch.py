"""The upstream patches (upstream/python-sdk/patches/, applied in order) apply to the mcp 2.3.0 release, pass the
SDK's own client and server suites, carry the library with no workaround, and make an example server the kit passes.

In steps that each fail with what went wrong: the release's source distribution from the package index (CI
reaches PyPI and no other network), the patches applied with `git apply`, an environment with the patched SDK,
the test tools the sdist's own lockfile pins, this library and the demos (one module-scoped environment); then
the SDK's `tests/client` and `tests/server` (where the patches' own tests live), and this project's placement and
client tests with that environment as their 2.x interpreter; and the kit, over stdio, against the example server
the patches add (examples/servers/idempotency-ledger), which imports only the SDK. Three to seven minutes on 2
cores (7 min 11 s with a cold pip cache, 2 min 57 s warm); the kit's run alone took 1 min 28 s by hand.
"""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCHES = sorted((ROOT / "upstream" / "python-sdk" / "patches").glob("*.patch"))
KIT = ROOT / "conformance" / "kit.py"
EXAMPLE = Path("examples") / "servers" / "idempotency-ledger"
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


def apply_patches(sdk: Path) -> None:
    """The patches applied in order to the unpacked sdist, or a failure that names the one that no longer applies."""
    assert PATCHES, "upstream/python-sdk/patches/ holds no patch"
    for patch in PATCHES:
        applied = run(["git", "apply", str(patch)], sdk)
        assert applied.returncode == 0, f"{patch.name} does not apply to mcp {RELEASE}:\n{tail(applied)}"
    assert (sdk / "tests" / "server" / "test_idempotency.py").exists(), "the patches brought no tests of their own"


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


def kit_against_the_example(python: Path, sdk: Path, results: Path) -> dict[str, str]:
    """The kit's checks against the example server over stdio, started as each check needs: check id -> status."""
    # The example declares the extension under the kit's vendor prefix, as a server must until it is adopted.
    server = f"{python} -m mcp_idempotency_ledger --identifier com.example.sep3182/idempotency"
    started_as = {
        "--command": "",
        "--slow-command": " --charge-delay 2",
        "--short-retention-command": " --retention-seconds 1",
        "--bounded-command": " --max-records 3",
        "--short-lease-command": " --charge-delay 3",  # one process: no lease; a charge two seconds past the kit's
    }
    servers = [part for option, extra in started_as.items() for part in (option, server + extra)]
    tools = ["--charge-tool", "test_idempotent_charge", "--count-tool", "test_idempotent_charge_count"]
    tools += ["--other-tool", "test_idempotent_charge_other", "--placement", "meta"]
    ran = run([sys.executable, str(KIT), *servers, *tools, "--json", str(results)], sdk / EXAMPLE)
    assert results.exists(), f"the kit wrote no results:\n{tail(ran)}"
    return {check["id"]: check["status"] for check in json.loads(results.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The patched sdist's root and the python of an environment with it, the library and the demos."""
    folder = tmp_path_factory.mktemp("upstream")
    sdk = downloaded_sdist(folder)
    apply_patches(sdk)
    return sdk, patched_environment(sdk, folder / "venv")


@pytest.mark.slow
@pytest.mark.timeout(600)  # a download, an environment, and some three thousand SDK tests on two cores
def test_patches_apply_to_the_release_pass_the_sdk_suites_and_carry_the_library(patched: tuple[Path, Path]):
    sdk, python = patched
    suites = sdk_suites(python, sdk)
    assert suites.returncode == 0, f"the SDK's suites fail on the patched SDK:\n{tail(suites)}"
    ours = project_tests(python)
    assert ours.returncode == 0, f"the library's tests fail on the patched SDK:\n{tail(ours)}"


# What the kit cannot ask of a server on stdio: a second principal and a narrowed token (K2, K3) need HTTP
# behind authorisation, a retry in another revision needs HTTP; and what the example does not offer (Tasks,
# a tool that asks first), which the kit reports as not applicable; and a run past a short deadline, since the
# example takes no --deadline and its one-process store declares no lease (the SDK's own tests hold the deadline).
NOT_ON_STDIO = {
    "sep-3182-in-progress-ends-by-the-deadline",
    "sep-3182-key-scoped-to-principal",
    "sep-3182-other-principals-key-no-conflict",
    "sep-3182-other-principals-key-not-in-progress",
    "sep-3182-replay-rechecks-authorisation",
    "sep-3182-share-per-principal",
    "sep-3182-replay-across-revisions",
    "sep-3182-task-handle-replayed",
    "sep-3182-input-required-never-replayed",
}


@pytest.mark.slow
@pytest.mark.timeout(600)  # five example servers, the slow ones' charges two and three seconds each
def test_the_kit_passes_the_example_server_over_stdio(patched: tuple[Path, Path], tmp_path: Path):
    sdk, python = patched
    statuses = kit_against_the_example(python, sdk, tmp_path / "checks.json")
    not_passed = {check: status for check, status in statuses.items() if status != "SUCCESS"}
    assert not_passed == dict.fromkeys(NOT_ON_STDIO, "SKIPPED"), not_passed
    assert len(statuses) - len(NOT_ON_STDIO) >= 30, sorted(statuses)  # the whole kit ran, not one check
