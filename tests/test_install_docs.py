"""The README's set-up commands: the documented CPU install keeps constraints.txt's pin."""

import re
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _pinned_torch() -> Requirement:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [Requirement(line) for line in lines if line.strip().startswith("torch")]
    assert len(pins) == 1
    return pins[0]


def _commands() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_gives_cpu_users_the_cpu_build_of_the_pinned_torch():
    pin = _pinned_torch()
    cpu = [c for c in _commands() if CPU_INDEX in c]
    assert cpu, "the README has no command installing torch from PyTorch's CPU index"
    command = cpu[0]
    first, rest = command.split(CPU_INDEX, 1)
    torch_arg = re.search(r"pip install (torch\S*)", first).group(1)
    assert Requirement(torch_arg).specifier == pin.specifier  # the same version as the pin
    assert "-c constraints.txt" in rest  # then the usual set-up, which must keep that build
    version = str(next(iter(pin.specifier))).lstrip("=")
    assert pin.specifier.contains(f"{version}+cpu")  # so pip keeps the CPU build installed


def test_readme_two_commands_unchanged():
    commands = _commands()
    assert ("python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . && "
            ".venv/bin/ctxkit demo") in commands
    assert ("python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[dev]' && "
            ".venv/bin/python -m pytest") in commands
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith(commands[1])
