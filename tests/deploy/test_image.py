"""The Dockerfile builds an image that runs as a non-root user, with no compiler, and starts the bot.

``make image-check`` runs this (``make test`` leaves it out: it takes minutes and needs root,
podman and mmdebstrap). It builds without any registry: the base image is made from Debian's
packages (mmdebstrap, then ``podman import``) and given as the ``BASE`` build argument; the
Python dependencies come from a wheelhouse that pip downloads from its configured index and the
build mounts. Nothing is run as a container: the image is mounted and inspected, and
``runbook-bot`` is started from its filesystem with chroot as the image's user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
BASE = os.environ.get("RUNBOOK_BOT_IMAGE_BASE", "localhost/runbook-bot-base:bookworm")
TAG = "localhost/runbook-bot:check"
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")

pytestmark = [pytest.mark.slow, pytest.mark.image]


def sh(*args: str | Path, timeout: float = 900, check: bool = True) -> str:
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                         check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed:\n{out.stdout[-3000:]}\n"
                             f"{out.stderr[-3000:]}")
    return out.stdout


def base_image(tmp: Path) -> None:
    """A Debian bookworm image with python3 and its venv module, from Debian's packages."""
    if subprocess.run(["podman", "image", "exists", BASE], check=False).returncode == 0:
        return
    tar = tmp / "base.tar"
    sh("mmdebstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
       "--aptopt=APT::Install-Recommends \"false\"", "--dpkgopt=path-exclude=/usr/share/doc/*",
       "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
       "bookworm", tar, MIRROR)
    sh("podman", "import", tar, BASE)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, Path]]:
    missing = [t for t in ("podman", "mmdebstrap", "chroot") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: the image build needs podman and "
                    "mmdebstrap (apt-get install podman mmdebstrap)")
    if os.geteuid() != 0:
        pytest.skip("the image check needs root (podman image mount, chroot)")
    tmp = tmp_path_factory.mktemp("image")
    base_image(tmp)
    wheels = tmp / "wheels"
    sh(sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "-d", wheels,
       f"{ROOT}[postgres]", "setuptools>=69", "wheel")
    # --isolation chroot: RUN steps without an OCI runtime (none can start containers here)
    sh("podman", "build", "--isolation", "chroot", "--build-arg", f"BASE={BASE}",
       "--build-arg", "PIP_NO_INDEX=1", "--build-arg", "PIP_FIND_LINKS=/wheels",
       "--build-arg", "VERSION=check", "--build-arg", "REVISION=test",
       "-v", f"{wheels}:/wheels:ro", "-t", TAG, ROOT)
    (config,) = json.loads(sh("podman", "image", "inspect", TAG))
    root = Path(sh("podman", "image", "mount", TAG).strip())
    try:
        yield config, root
    finally:
        sh("podman", "image", "umount", TAG, check=False)


def test_the_image_runs_runbook_bot_as_a_non_root_user_with_its_labels(image: tuple[dict, Path]) -> None:
    config, _ = image
    c = config["Config"]
    assert c["User"] == "10001:10001"
    assert c["Entrypoint"] == ["runbook-bot"] and c["Cmd"] == ["slack", "serve"]
    labels = c["Labels"]
    assert labels["org.opencontainers.image.title"] == "runbook-bot"
    assert labels["org.opencontainers.image.version"] == "check"
    assert labels["org.opencontainers.image.revision"] == "test"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"


def test_no_compiler_or_installer_is_in_the_image(image: tuple[dict, Path]) -> None:
    _, root = image
    tools = ["gcc", "cc", "c++", "g++", "clang", "make", "ld", "as"]
    found = [f"{d}/{t}" for d in ("usr/bin", "usr/local/bin", "bin", "opt/runbook-bot/bin")
             for t in tools if (root / d / t).exists()]
    assert not found
    assert not list((root / "opt" / "runbook-bot" / "bin").glob("pip*"))
    assert not (root / "src").exists()


def test_runbook_bot_starts_from_the_image_filesystem_as_its_user(image: tuple[dict, Path]) -> None:
    _, root = image
    env = {"PATH": "/opt/runbook-bot/bin:/usr/bin:/bin", "HOME": "/var/lib/runbook-bot"}
    chroot = shutil.which("chroot")
    assert chroot is not None
    version = subprocess.run([chroot, "--userspec=10001:10001", str(root), "runbook-bot",
                              "--version"], capture_output=True, text=True, env=env, timeout=60,
                             check=False)
    assert version.returncode == 0 and version.stdout.startswith("runbook-bot "), version.stderr
    listed = subprocess.run([chroot, "--userspec=10001:10001", str(root), "runbook-bot", "list"],
                            capture_output=True, text=True, env=env, timeout=60, check=False,
                            cwd="/")
    shipped = sorted(p.stem for p in (ROOT / "runbooks").glob("*.yaml"))
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == shipped, listed.stderr


def test_what_the_bot_never_runs_is_not_in_the_image(image: tuple[dict, Path]) -> None:
    """The Dockerfile's trims: no asyncio Kubernetes client or aiohttp, no pip or setuptools, and
    botocore's models only of the AWS services it keeps (its ``AWS_SERVICES``)."""
    _, root = image
    (site,) = (root / "opt" / "runbook-bot" / "lib").glob("python3.*/site-packages")
    assert (site / "kubernetes" / "client").is_dir() and not (site / "kubernetes" / "aio").exists()
    for gone in ("aiohttp", "yarl", "multidict", "pip", "setuptools"):
        assert not (site / gone).exists(), gone
    models = {p.name for p in (site / "botocore" / "data").iterdir() if p.is_dir()}
    assert models == {"ec2", "sts", "eks"}
