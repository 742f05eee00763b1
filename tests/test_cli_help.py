"""Every command's --help: one -f vocabulary, Markdown tables wherever a table is printed, and one size parser
for every option that is a size (issue 32, "Consistency")."""
from __future__ import annotations

import re

import pytest

from sdbench.cli import _load_commands, app, main
from sdbench.cli.formats import FORMATS, names_of, vocabulary


def _commands() -> list[list[str]]:
    """Every command path (subcommands of groups too), from the command line's own --help."""
    _load_commands()
    import typer.main

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None) or {}
        if path:
            yield path
        for name, sub in subs.items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


COMMANDS = _commands()


def _help(capsys, path: list[str]) -> str:
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def _option_lines(text: str) -> dict[str, str]:
    """Option name -> its help entry (first line and the lines that continue it)."""
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"\s+(?:-\w, )?(--[\w-]+)(?:/--[\w-]+)?(?:,\s*--[\w-]+)*\s*(.*)", line)
        if m:
            current = m.group(1)
            out[current] = line.strip()
        elif current and line.startswith(" " * 10):
            out[current] += " " + line.strip()
        else:
            current = None
    return out


def test_the_walk_finds_every_command():
    names = {" ".join(p) for p in COMMANDS}
    assert {"run", "runs", "runs delete", "show", "compare", "export", "capacity", "probe", "powerloss", "import",
            "db check", "fio", "sweep"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_format_option_speaks_the_one_vocabulary(path, capsys):
    opts = _option_lines(_help(capsys, path))
    if "--format" not in opts:
        assert " ".join(path) not in FORMATS
        return
    entry = opts["--format"]
    m = re.search(r"<([\w|]+)>", entry)
    assert m, entry
    offered = m.group(1).split("|")
    assert set(offered) <= set(vocabulary()), (path, offered)
    assert tuple(offered) == names_of(" ".join(path))
    for name in offered:  # the help says what each name gives here
        assert f"{name}:" in entry, (name, entry)
    if path[0] != "import":  # import's -f names its input; every command that prints tables offers md
        assert "md" in offered


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_size_option_takes_suffixes(path, capsys):
    opts = _option_lines(_help(capsys, path))
    for name, entry in opts.items():
        if re.search(r"(size|offset|chunk|bytes|^--bs)$", name.lstrip("-")) and path != ["fio"]:
            assert f"{name} SIZE" in entry and "1M" in entry, entry


@pytest.mark.parametrize("argv", [
    ["run", "--device", "missing.img", "--offset", "1M", "--size", "64k"],
    ["probe", "missing.img", "--offset", "1M", "--size", "64MiB"],
    ["stream", "--device", "missing.img", "--size", "2M", "--chunk", "64k", "--offset", "1e6"],
    ["preset", "cdm", "--device", "missing.img", "--size", "16M", "--offset", "1M"],
    ["fio", "--device", "missing.img", "--bs", "4k", "--size", "1M", "--offset", "1M"],
    ["calibrate", "--capacity-bytes", "1G"],
    ["powerloss", "logger-sd-fat-pauses", "--workload", "file_bytes=4k", "--replay", "5", "--fs", "fat,littlefs"],
], ids=lambda a: a[0])
def test_sizes_with_suffixes_are_read_by_the_one_parser(argv, capsys, tmp_path, monkeypatch):
    """The README says every size takes suffixes; `run --offset 1M` and `probe --offset 1M` were refused."""
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    # refused for what follows (no such target, a missing option), never for the size
    assert "Invalid value" not in err and "not a size" not in err and "SIZE" not in err, err


@pytest.mark.parametrize("argv", [["--offset", "1x"], ["--offset", "-4k"], ["--size", "1.5"]])
def test_a_bad_size_is_one_line_naming_the_option(argv, capsys):
    assert main(["run", "--device", "missing.img", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and argv[0] in err and "not a" in err, err
