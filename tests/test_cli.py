"""Every command line checks every option at the door (:mod:`dpbook.checks`): each option that takes a value declares
its domain, and every value outside it (the domain's own ``bad`` examples) exits 2, before any work, with a message
that names the option and no traceback."""

import argparse
import ast
import contextlib
import importlib
import io
from pathlib import Path

import pytest

from dpbook import checks

ROOT = Path(__file__).resolve().parents[1]


def command_lines() -> dict[str, argparse.ArgumentParser]:
    """Every module of dpbook that runs as a command (``if __name__ == "__main__"``) -> its ``parser()``."""
    found = {}
    for path in sorted((ROOT / "dpbook").rglob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = importlib.import_module(name)
            assert hasattr(module, "parser"), f"{name} runs as a command but has no parser() to check its options"
            found[name.removesuffix(".__main__")] = module.parser()
    return found


COMMANDS = command_lines()


def options(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(the arguments that reach a sub-command, the action) of every option and positional that takes a value."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, (*prefix, name))
        elif action.nargs != 0 and not isinstance(action, argparse._HelpAction):
            yield prefix, action


def name_of(action: argparse.Action) -> str:
    """How argparse's messages name an action: its longest option string, or a positional's metavar or dest."""
    if action.option_strings:
        return max(action.option_strings, key=len)
    return action.metavar if isinstance(action.metavar, str) else action.dest


CASES = [(command, prefix, action, bad) for command, parser in COMMANDS.items()
         for prefix, action in options(parser) if isinstance(action.type, checks.Domain) for bad in action.type.bad]


def test_the_command_lines_are_found():
    assert set(COMMANDS) == {"dpbook.repro.sweep", "dpbook.audit", "dpbook.audit.one_run", "dpbook.repro.bench",
                             "dpbook.repro.dry_run", "dpbook.repro.contributed", "dpbook.repro.gpu_check"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_declares_its_domain(command):
    undeclared = [(" ".join(prefix), name_of(action)) for prefix, action in options(COMMANDS[command])
                  if not isinstance(action.type, checks.Domain)]
    assert not undeclared, f"{command}: options without a domain (type=dpbook.checks...): {undeclared}"


def refusal(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stop:
        parser.parse_args(argv)
    return stop.value.code, err.getvalue()


@pytest.mark.parametrize("command, prefix, action, bad", CASES,
                         ids=[f"{c}:{' '.join(p)}:{name_of(a)}={b!r}" for c, p, a, b in CASES])
def test_every_value_outside_an_options_domain_exits_2_naming_it(command, prefix, action, bad, tmp_path,
                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default folder the parser creates lands here
    values = [bad] * (action.nargs if isinstance(action.nargs, int) else 1)
    argv = [*prefix, *([name_of(action)] if action.option_strings else []), *values]
    code, message = refusal(COMMANDS[command], argv)
    assert code == 2, f"{argv} was accepted"
    assert f"argument {name_of(action)}:" in message and "Traceback" not in message, message
    assert len(message.strip().splitlines()[-1]) > len(f"argument {name_of(action)}: ") + 10, message


def test_every_domain_has_outside_values():
    empty = [(c, name_of(a)) for c, parser in COMMANDS.items() for _, a in options(parser)
             if isinstance(a.type, checks.Domain) and not a.type.bad]
    assert not empty and len(CASES) > 150


def or_defaults(tree: ast.Module) -> list[str]:
    """``x or default`` where ``x`` is a command line's option (``args.x``) or a function's numeric or list parameter:
    0, an empty list or a negative count would silently mean the default."""
    found = []
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
        counts = {a.arg for a in arguments if a.annotation is not None
                  and any(kind in ast.unparse(a.annotation) for kind in ("int", "float", "Sequence", "list", "tuple"))}
        for node in ast.walk(function):
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
                first = node.values[0]
                option = (isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name)
                          and first.value.id == "args")
                if option or (isinstance(first, ast.Name) and first.id in counts):
                    found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_option_or_count_falls_back_to_a_default_with_or():
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "dpbook").rglob("*.py"))
             if (hits := or_defaults(ast.parse(p.read_text())))}
    assert not found, f"write `default if x is None else x` (and check x) instead of `x or default`: {found}"


def test_the_or_default_rule_finds_the_pattern():
    source = ("def run(seeds: int | None = None, repeats: int = 0):\n"
              "    return seeds or 5, repeats or 7, args.jobs or 2\n")
    assert len(or_defaults(ast.parse(source))) == 3
