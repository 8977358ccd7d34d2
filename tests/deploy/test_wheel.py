"""A wheel, installed (not editable) into a fresh virtual environment, carries the shipped runbooks.

The wheel is built from a copy of the files a source distribution holds, so nothing outside them
(this checkout's ``runbooks/``) can stand in for what the wheel must contain. The new environment
gets the wheel alone (``--no-deps``); its dependencies are read from this test environment's
site-packages, added after its own, so the ``bot`` package imported is the installed one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "runbooks").glob("*.yaml"))


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False, env=env)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a new virtual environment with the wheel installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("bot", "runbooks", "templates"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp / "dist"
    # pip builds in an isolated environment, with setuptools from the configured index
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                "-q", "-w", dist, src, cwd=tmp)
    if built.returncode != 0 and "No matching distribution found for setuptools" in built.stderr:
        pytest.skip("cannot build a wheel here: pip finds no setuptools>=69 to build with "
                    "(no package index reachable)")
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("runbook_bot-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(run(py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                    cwd=tmp).stdout.strip())
    (site / "test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = run(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index",
               "--disable-pip-version-check", "-q", wheel, cwd=tmp)
    assert done.returncode == 0, done.stderr
    return env_dir / "bin"


def test_runbook_bot_list_from_another_directory_shows_every_shipped_runbook(
        installed: Path, tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    where = run(installed / "python", "-c", "import bot, bot.runbook.dirs as d; "
                "print(bot.__file__); print(d.shipped_dir())", cwd=tmp_path, env=env)
    module, shipped = where.stdout.split()
    assert module.startswith(str(installed.parent)) and shipped.startswith(str(installed.parent))
    out = run(installed / "runbook-bot", "list", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == SHIPPED
    show = run(installed / "runbook-bot", "show", "node-dead-ngns", cwd=tmp_path, env=env)
    assert show.returncode == 0 and show.stdout.startswith("node-dead-ngns: "), show.stderr
    # the templates came with it too: a transcript renders (export needs a run; the loader suffices)
    templates = run(installed / "python", "-c", "from bot.actions.reports import TEMPLATES; "
                    "print(TEMPLATES.is_dir(), TEMPLATES)", cwd=tmp_path, env=env)
    assert templates.stdout.startswith(f"True {installed.parent}"), templates.stdout
