"""Usage errors as a user sees them: one line on standard error, exit 2, naming the option and the closest
names where there are some (real runs of ``python -m dcpctl``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PCAP = str(ROOT / "samples" / "dcp-session.pcap")


def usage_error(*args: str) -> str:
    """Runs dcpctl; asserts exit 2, nothing on stdout and one ``dcpctl: error:`` line; returns that line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "dcpctl", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("dcpctl: error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "says"), [
    (["decode", "--job", "2", PCAP], "no such option: --job (did you mean --jobs?)"),
    (["decode", "--fitler", "x", PCAP], "no such option: --fitler (did you mean --filter?)"),
    (["decode"], "missing argument"),
    (["decode", "-F", "bogus", PCAP], "--format: 'bogus' is not one of 'pretty'"),
    (["decode", "--jobs", "0", PCAP], "--jobs: "),
    (["decode", "--jobs", "many", PCAP], "--jobs: "),
    # stream ids are 1 to 65535 (reference 2.2): 0, -1 or 65536 would select nothing, silently
    (["decode", "--stream-id", "0", PCAP], "--stream-id: input should be greater than or equal to 1"),
    (["decode", "--stream-id", "-1", PCAP], "--stream-id: input should be greater than or equal to 1"),
    (["decode", "--stream-id", "65536", PCAP], "--stream-id: input should be less than or equal to 65535"),
    (["decode", "--format"], "'--format' requires an argument"),
    # the last was taken, the first dropped without a word
    (["decode", "--filter", "by_seqno == 201", "-Y", "by_seqno == 203", PCAP], "--filter given twice: write one "
     "expression, its parts joined with and / or"),
    (["decod"], "no such command 'decod'. Did you mean 'decode'"),
    (["rollback", "bogus"], "no such command 'bogus'"),
    (["stream", "127.0.0.1:abc"], "HOST[:PORT]: '127.0.0.1:abc': the port must be a number"),  # an argument's
    # a socket takes no timeout past the platform's time_t: 1e10 was an OverflowError traceback
    (["stream", "127.0.0.1:1", "--timeout", "1e10"], "--timeout: input should be less than or equal to 86400"),
    (["failover", "127.0.0.1:1", "--timeout", "inf"], "--timeout: input should be less than or equal to 86400"),
    (["rollback", "negotiate", "127.0.0.1:1", "--vbucket", "0", "--uuid", "0", "--seqno", "0", "--timeout",
      "1e12"], "--timeout: input should be less than or equal to 86400"),
    # a live capture is written as it comes, never compressed: a name asking for it is refused, before
    # connecting or opening the interface
    (["stream", "127.0.0.1:1", "--write", "x.pcap.gz"], "--write x.pcap.gz: written uncompressed as the "
     "traffic comes: name it x.pcap and compress it once written"),
    (["capture", "-i", "no-such-interface", "-w", "x.pcap.xz"], "-w x.pcap.xz: written uncompressed"),
    # a filter that does not compile is the command line's mistake, found before an interface is opened
    (["capture", "-i", "no-such-interface", "--bpf", "tcp port ((("], "--bpf: can't parse filter expression"),
    # the nodes' consecutive ports would pass 65535: refused before binding (and before the PEM files are read)
    (["serve", "--port", "65535", "--nodes", "2"], "--port 65535 with --nodes 2: the last node would listen on "
     "65536, past 65535"),
    (["serve", "--port", "0", "--tls-port", "65534", "--nodes", "3", "--tls-cert", "no-cert.pem", "--tls-key",
      "no-key.pem"], "--tls-port 65534 with --nodes 3: the last node would listen on 65536"),
])
def test_usage_error_is_one_line(args: list[str], says: str) -> None:
    assert says in usage_error(*args)


def test_an_option_like_none_gets_no_suggestion() -> None:
    """click's own pick has no floor: --bogus got 'did you mean --jobs?', a hint that misleads."""
    assert usage_error("decode", "--bogus", PCAP) == "dcpctl: error: no such option: --bogus"


@pytest.mark.parametrize(("args", "says"), [
    (["--opcode", "DCP_MUTATON"], "--opcode: unknown opcode 'DCP_MUTATON' (did you mean DCP_MUTATION?)"),
    (["--opcode", "DCP_MUTATION", "--opcode", "dcp_deleton"], "(did you mean DCP_DELETION?)"),
    (["--opcode", "DCP_ZZ*"], "--opcode: matches no opcode 'DCP_ZZ*'"),
    (["--opcode", "0x100"], "--opcode: '0x100': opcode numbers are 0 to 0xff"),
    (["--filter", "by_seqnoo > 1"], "--filter: unknown field 'by_seqnoo' (column 1) (did you mean by_seqno?)"),
    (["--filter", "exists(rolback_seqno)"], "(did you mean rollback_seqno?)"),
])
def test_a_misspelt_name_is_an_error_naming_the_closest(args: list[str], says: str) -> None:
    """Issue 18: these selected nothing and exited 0, as if the capture had no such messages."""
    assert says in usage_error("decode", "-F", "jsonl", *args, PCAP)


def decoded(*args: str) -> list[str]:
    """The opcodes decode prints with ``args``."""
    done = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "jsonl", *args, PCAP],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
                          check=True)
    return [json.loads(line)["opcode"] for line in done.stdout.splitlines()]


def test_opcodes_by_name_in_any_case_glob_or_number() -> None:
    assert decoded("--opcode", "DCP_MUTATION") == ["DCP_MUTATION", "DCP_MUTATION"]
    assert decoded("--opcode", "dcp_mutation") == decoded("--opcode", "0x57") == decoded("--opcode", "87") \
        == ["DCP_MUTATION", "DCP_MUTATION"]
    assert set(decoded("--opcode", "DCP_*")) >= {"DCP_MUTATION", "DCP_STREAM_REQ"}


def test_a_repeated_key_selects_either() -> None:
    """As --opcode and --vbucket: the last one was all --key took."""
    done = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-f", "{key}", "--key", "airline_10", "--key",
                           "/_137$/", PCAP], capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["airline_10", "airline_137"]


def test_filters_name_the_context_fields_and_exists_works() -> None:
    assert decoded("--filter", "exists(by_seqno)")
    assert decoded("--filter", "exists(latency_ms) and latency_ms >= 0 and exists(connection)")
    assert decoded("--filter", "exists(stream_vbucket) and frames != [] and value.x == null or true")
    assert decoded("--filter", "exists(rollback_seqno) and by_seqno > 0") == []  # real fields, none in both


def test_a_template_naming_no_field_fails_before_connecting() -> None:
    with socket.socket() as unused:  # a port nobody listens on: the error must come before any connection
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DCPCTL_PASSWORD": "password"}
    done = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{port}", "--timeout", "2",
                           "-f", "{opcode} {by_seqnoo}"], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "dcpctl: error: -f: bad template: {by_seqnoo}: unknown field 'by_seqnoo' " \
                          "(did you mean by_seqno?)\n"
    done = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{port}", "--timeout", "2",
                           "-F", "jsonl", "-f", "{opcode}"], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    assert (done.returncode, done.stderr) == (2, "dcpctl: error: -f and --format exclude each other: -f writes "
                                                 "its own lines\n")


@pytest.mark.parametrize("command", ["decode", "capture", "stream", "failover", "serve", "analyze",
                                     "rollback explain", "rollback negotiate"])
def test_option_values_are_named_not_typed_in_help(command: str) -> None:
    """Issue 18: -h showed <list[int]> and <int range> where the man pages say PORT and N."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"}
    done = subprocess.run([sys.executable, "-m", "dcpctl", *command.split(), "-h"], capture_output=True,
                          text=True, env=env, timeout=60, check=True)
    options = [line for line in done.stdout.splitlines() if line.lstrip("│ ").startswith("-")]
    assert options
    assert [line for line in options if any(t in line for t in ("<list[", "<int", "<float"))] == []


def test_a_from_seqno_past_the_until_seqno_is_a_usage_error_before_connecting() -> None:
    """users.md #7: --from 50 --until 10 sent end 50 and printed nothing; now one line naming both (nothing
    listens on port 1: refused before connecting)."""
    line = usage_error("stream", "127.0.0.1:1", "--vbuckets", "0", "--from", "50", "--until", "10")
    assert "--from 50" in line
    assert "--until 10" in line


@pytest.mark.parametrize(("args", "names"), [([], "decode, capture, hexdump"), (["rollback"], "explain, negotiate")])
def test_no_command_shows_the_help_and_names_the_commands(args: list[str], names: str) -> None:
    """A bare ``dcpctl`` (or a group without its command) shows the help, and its error line says what is
    missing rather than nothing after ``dcpctl: error:``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "dcpctl", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert "Usage: dcpctl" in done.stdout
    assert done.stderr.startswith(f"dcpctl: error: missing command: one of {names}")
    assert done.stderr.count("\n") == 1


def _file_parameters() -> list[tuple[list[str], str, bool]]:
    """Every command's parameters that name a file or directory: (the command's words, the option or the
    argument's metavar, whether it is an option), read off the commands themselves so that a new one is held
    to the rule too."""
    import typer.main  # noqa: PLC0415 - only this test walks the commands

    from dcpctl.cli import make_app  # noqa: PLC0415

    found: list[tuple[list[str], str, bool]] = []

    def walk(command: Any, words: list[str]) -> None:
        for param in command.params:
            if param.type_descriptor.is_path or param.metavar in ("FILE", "CAPTURE"):
                name = max(param.opts, key=len) if param.param_type_name == "option" else param.metavar
                found.append((words, name, param.param_type_name == "option"))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*words, name])

    walk(typer.main.get_command(make_app()), [])
    return found


FILE_PARAMETERS = _file_parameters()
# each command's other required arguments, so that the empty name is the only mistake
_REQUIRED = {"stream": ["127.0.0.1:1"], "failover": ["127.0.0.1:1"], "rollback negotiate": ["127.0.0.1:1"],
             "redact": [PCAP, "-o", "never.pcap"], "analyze": [PCAP]}


def test_every_command_with_files_is_walked() -> None:
    commands = {" ".join(words) for words, _, _ in FILE_PARAMETERS}
    assert commands >= {"decode", "hexdump", "encode", "redact", "analyze", "stream", "capture", "failover",
                        "serve", "rollback explain", "rollback negotiate"}


@pytest.mark.parametrize(("words", "name", "option"), FILE_PARAMETERS,
                         ids=[f"{' '.join(w)} {n}" for w, n, _ in FILE_PARAMETERS])
def test_an_empty_file_name_is_a_usage_error(words: list[str], name: str, option: bool, tmp_path: Path) -> None:
    """Python reads Path("") as ".": `redact -o ""` (a variable not set) wrote into the working directory and
    `--password-file ""` was called a directory. Run in an empty directory, which must stay empty."""
    # an option given twice takes the last value: redact's -o never.pcap, then --output ""
    args = [*words, *_REQUIRED.get(" ".join(words), []), *([name, ""] if option else [""])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "dcpctl", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout) == (2, ""), (args, done.stderr)
    assert done.stderr == f"dcpctl: error: {name}: an empty name (a shell variable not set?)\n", args
    assert list(tmp_path.iterdir()) == []
