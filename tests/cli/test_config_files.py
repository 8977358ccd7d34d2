"""Which config file is read, runbook directories on top of the shipped runbooks, ``config check``.

Run through ``bot.cli.main`` as a person runs the commands, from a directory outside the tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli import main
from bot.runbook.dirs import shipped_dir

ROOT = Path(__file__).parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "runbooks").glob("*.yaml"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment: no config anywhere, cwd outside the tree."""
    for var in ("RUNBOOK_BOT_CONFIG", "RUNBOOK_BOT_RUNBOOKS_DIR", "RUNBOOK_BOT_DATABASE_URL",
                "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


def listed(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:]]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def renamed(name: str, title: str) -> str:
    """A shipped runbook's text under a new title (to tell the copies apart)."""
    text = (ROOT / "runbooks" / f"{name}.yaml").read_text()
    head, _, tail = text.partition("  title: ")
    return head + f"  title: {title}\n" + tail.split("\n", 1)[1]


def test_with_no_config_list_shows_every_shipped_runbook(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    assert listed(capsys.readouterr().out) == SHIPPED


def test_a_later_directory_overrides_a_shipped_runbook_with_a_warning_naming_both_files(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = home / "etc" / "site-runbooks"
    mine = write(site / "node-recovered.yaml", renamed("node-recovered", "Our own recovery"))
    config = write(home / "etc" / "bot.yaml", "runbooks_dir: [site-runbooks]\n")  # relative
    assert main(["--config", str(config), "list"]) == 0
    out = capsys.readouterr()
    assert listed(out.out) == SHIPPED
    assert "Our own recovery" in out.out
    assert out.err == (f"runbook-bot: warning: runbook 'node-recovered': {mine} overrides "
                       f"{shipped_dir() / 'node-recovered.yaml'}\n")


def test_the_last_of_several_directories_wins(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / "a" / "node-recovered.yaml", renamed("node-recovered", "From A"))
    write(home / "b" / "node-recovered.yaml", renamed("node-recovered", "From B"))
    write(home / "work" / "runbook-bot.yaml", f"runbooks_dir: [{home / 'a'}, {home / 'b'}]\n")
    assert main(["show", "node-recovered"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("node-recovered: From B\n")
    assert out.err.count("overrides") == 2 and f"{home / 'b' / 'node-recovered.yaml'} overrides " \
        f"{home / 'a' / 'node-recovered.yaml'}" in out.err


def test_a_broken_override_fails_instead_of_running_the_shipped_runbook(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / "site" / "node-recovered.yaml", "apiVersion: nope\n")
    write(home / "work" / "runbook-bot.yaml", f"runbooks_dir: {home / 'site'}\n")
    assert main(["show", "node-recovered"]) == 1
    assert "node-recovered.yaml" in capsys.readouterr().err
    assert main(["list"]) == 1
    out = capsys.readouterr()
    assert "node-recovered" not in listed(out.out) and "site/node-recovered.yaml:" in out.err


def test_a_missing_runbooks_directory_is_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / "work" / "runbook-bot.yaml", "runbooks_dir: nowhere\n")
    assert main(["list"]) == 1
    assert f"runbooks directory {home / 'work' / 'nowhere'} does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["option", "env", "cwd", "xdg"])
def test_the_config_is_found_in_the_documented_order_and_v_names_it(
        home: Path, where: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # the place under test and every later one hold a file: the one under test must win
    order = ["option", "env", "cwd", "xdg"]
    later = order[order.index(where):]
    paths = {"option": home / "option.yaml", "env": home / "env.yaml",
             "cwd": home / "work" / "runbook-bot.yaml",
             "xdg": home / "xdgdir" / "runbook-bot" / "config.yaml"}
    for w in later:
        write(paths[w], f"database_url: sqlite:///{home}/{w}.db\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdgdir"))
    if "env" in later:
        monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(paths["env"]))
    args = ["--config", str(paths["option"])] if where == "option" else []
    assert main([*args, "-v", "runs"]) == 0
    err = capsys.readouterr().err
    how = {"option": "--config", "env": "RUNBOOK_BOT_CONFIG", "cwd": "found in the current directory",
           "xdg": "found in the XDG config directory"}[where]
    shown = "runbook-bot.yaml" if where == "cwd" else str(paths[where])
    assert err.splitlines()[0] == f"runbook-bot: config: {shown} ({how})"
    assert [w for w in order if (home / f"{w}.db").exists()] == [where]  # its settings were used


def test_a_named_config_file_that_is_missing_is_a_config_error(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / "work" / "runbook-bot.yaml", "{}\n")  # must not be used in its place
    assert main(["runs", "--config", str(home / "typo.yaml")]) == 2
    assert capsys.readouterr().err == (f"runbook-bot: error: --config names {home / 'typo.yaml'}, "
                                       "which does not exist or is not a file\n")
    assert main(["config", "check", "--config", str(home / "typo.yaml")]) == 2  # a nested command
    assert "--config names" in capsys.readouterr().err
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(home / "typo.yaml"))
    assert main(["list"]) == 2
    assert "RUNBOOK_BOT_CONFIG names" in capsys.readouterr().err


def test_config_check_reports_the_database_and_runbooks_and_fails_on_an_unreachable_cluster(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = write(home / "kubeconfig", """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
""")
    write(home / "work" / "runbook-bot.yaml", f"""\
database_url: sqlite:///{home}/state.db
clusters:
  prod: {{kubeconfig: {kubeconfig}, context: ctx, request_timeout: 2}}
""")
    assert main(["config", "check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ok    config: runbook-bot.yaml (found in the current directory)"
    assert lines[1] == f"ok    runbooks: {len(SHIPPED)} from {shipped_dir()}"
    assert lines[2] == f"ok    database: sqlite:///{home}/state.db (sqlite), 0 runs"
    assert lines[3].startswith("warn  policy.start: not set; anyone who can reach the bot")
    assert lines[4].startswith("FAIL  cluster prod kubernetes: https://127.0.0.1:9 (kubeconfig "
                               f"{kubeconfig}, context ctx): ")


def test_config_check_of_an_invalid_config_is_exit_2(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home / "work" / "runbook-bot.yaml", "runbooks_dir: 3\n")
    assert main(["config", "check"]) == 2
    assert capsys.readouterr().err.startswith("runbook-bot: error: runbook-bot.yaml: runbooks_dir")
