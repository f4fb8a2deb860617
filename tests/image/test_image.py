"""The controller image: what it runs, as whom, and what it must not carry.

Each `docker run` costs seconds with the vfs storage driver (the container's
file system is a full copy), so the checks share two containers: one as the
image's own user, one as root to look everywhere.
"""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = pytest.mark.image

SIZE_LIMIT = 200_000_000

#: Compiler drivers and the C compiler proper: none may be in the image.
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "tcc", "x86_64-linux-gnu-gcc", "cpp")

AS_USER = """
echo "uid=$(id -u)"
echo "gid=$(id -g)"
multikueue --help > /tmp/help.txt 2>&1; echo "help_rc=$?"
sed 's/^/help: /' /tmp/help.txt
multikueue run --help > /dev/null 2>&1; echo "run_help_rc=$?"
python3 -c 'import multikueue, sys; print("package=" + multikueue.__file__); print("prefix=" + sys.prefix)'
"""

AS_ROOT = (
    "for c in " + " ".join(COMPILERS) + """; do command -v "$c" | sed 's/^/compiler=/'; done
ls -d /usr/lib/gcc/*/*/cc1 /usr/libexec/gcc/*/*/cc1 2>/dev/null | sed 's/^/compiler=/'
find / -xdev \\( -path '*/.cache/pip' -o -path '*/pip/cache' -o -path '/root/.cache' -o -path '/tmp/wheels' \\) 2>/dev/null \\
  | sed 's/^/cache=/'
find /var/lib/apt/lists -type f ! -name lock 2>/dev/null | sed 's/^/apt_list=/'
ls /opt/multikueue/bin | grep -x 'pip.*' | sed 's/^/pip=/'
true
"""
)


def parse(result: subprocess.CompletedProcess[str]) -> dict[str, list[str]]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    found: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, sep, value = line.partition("=") if not line.startswith("help: ") else ("help", "=", line[6:])
        if sep:
            found.setdefault(key.strip(), []).append(value)
    return found


@pytest.fixture(scope="module")
def as_user(run_in_image) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    return parse(run_in_image(AS_USER))


@pytest.fixture(scope="module")
def as_root(run_in_image) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    return parse(run_in_image(AS_ROOT, user="0"))


@pytest.fixture(scope="module")
def config(image: str) -> dict:  # type: ignore[type-arg]
    result = subprocess.run(
        ["docker", "image", "inspect", image], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(result.stdout)[0]


def test_runs_as_a_numeric_non_root_user(as_user: dict[str, list[str]], config: dict) -> None:  # type: ignore[type-arg]
    assert as_user["uid"] != ["0"]
    assert as_user["gid"] != ["0"]
    user = config["Config"]["User"]
    assert user.split(":")[0].isdigit() and user.split(":")[0] != "0", f"USER should be a numeric UID, not {user!r}"


def test_the_cli_works_inside(as_user: dict[str, list[str]]) -> None:
    assert as_user["help_rc"] == ["0"], "\n".join(as_user.get("help", []))
    assert any(" run " in line or line.strip().startswith("run ") for line in as_user["help"])
    assert as_user["run_help_rc"] == ["0"]


def test_the_package_is_installed_from_the_wheel_in_the_venv(as_user: dict[str, list[str]]) -> None:
    assert as_user["prefix"] == ["/opt/multikueue"]
    assert as_user["package"][0].startswith("/opt/multikueue/lib/"), as_user["package"]


def test_the_entrypoint_is_multikueue_run(config: dict) -> None:  # type: ignore[type-arg]
    assert config["Config"]["Entrypoint"] == ["multikueue", "run"]
    assert not config["Config"]["Cmd"], "arguments should be the user's, not a default CMD"


def test_no_compiler(as_root: dict[str, list[str]]) -> None:
    assert as_root.get("compiler", []) == []


def test_no_pip_cache_wheels_or_apt_lists(as_root: dict[str, list[str]]) -> None:
    assert as_root.get("cache", []) == []
    assert as_root.get("apt_list", []) == []
    assert as_root.get("pip", []) == [], "pip is a build tool; the image should not carry it"


def test_size_is_under_200_mb(config: dict) -> None:  # type: ignore[type-arg]
    assert config["Size"] < SIZE_LIMIT, f"{config['Size'] / 1e6:.1f} MB"


def test_python_environment(config: dict) -> None:  # type: ignore[type-arg]
    env = dict(item.split("=", 1) for item in config["Config"]["Env"])
    assert env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert env["PATH"].startswith("/opt/multikueue/bin:")
