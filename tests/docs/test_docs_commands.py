"""Issue 17 acceptance: the shell and Python blocks of README.md, docs/spark.md and docs/operations.md run, as a
reader would run them, on the venv with the servers they need.

One `orbitmq standalone` on free ports serves every block; the docs' default ports (9876, 10911) are rewritten to
its ports. `./dev run` is run for real on other free ports until it prints `Ready.`, then stopped with SIGTERM;
`orbitmq cluster init` gets free base ports. Blocks run in a scratch folder (with `.venv` and `examples` linked in)
so nothing lands in the clone. A block that is deliberately not run carries a `docs-test: skip` marker in the doc
(see docs_blocks.py); the test prints what it ran, skipped and treated as text. A failing block fails the test
with its text and output.

Markers (HTML comments right above a fence, or for the session one anywhere in the doc):

    <!-- docs-test: skip REASON -->                 the block is not run (counted and printed with the reason)
    <!-- docs-test: skip-line PREFIX | REASON -->   its lines starting with PREFIX are not run
    <!-- docs-test: python blocks share one session -->   the doc's Python blocks run in order in one interpreter

A fenced block is code when its language is a shell (sh, bash, shell, console) or Python, else text (yaml,
properties, layouts, no language) and only counted.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orbitmq.testing.procs import Standalone, free_broker_port, free_port, free_port_block

# ---- parsing and rewriting (sans-IO) ----------------------------------------------------------------------
SHELL = frozenset({"sh", "bash", "shell", "console"})
PYTHON = frozenset({"python", "py", "python3"})
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
_MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<body>.*?)\s*-->")
SESSION_MARKER = "python blocks share one session"


@dataclass
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.lang in SHELL:
            return "shell"
        if self.lang in PYTHON:
            return "python"
        return "text"

    @property
    def skip_reason(self) -> str | None:
        for m in self.markers:
            if m.startswith("skip ") and not m.startswith("skip-line"):
                return m[len("skip "):].strip()
        return None

    @property
    def skipped_lines(self) -> list[tuple[str, str]]:
        """[(command prefix, reason)] of its skip-line markers."""
        out = []
        for m in self.markers:
            if m.startswith("skip-line "):
                prefix, _, reason = m[len("skip-line "):].partition("|")
                out.append((prefix.strip(), reason.strip()))
        return out

    def where(self) -> str:
        return f"{self.doc}:{self.line} ({self.lang or 'no language'})"


def parse(path: Path, name: str) -> tuple[list[Block], bool]:
    """(the doc's fenced blocks in order, whether its Python blocks share one session)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    session = any(SESSION_MARKER in m.group("body") for ln in lines for m in _MARKER.finditer(ln))
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, lang = m.group("indent"), m.group("lang").lower()
        markers: list[str] = []
        j = i - 1
        while j >= 0 and (not lines[j].strip() or _MARKER.search(lines[j])):
            markers += [mm.group("body") for mm in _MARKER.finditer(lines[j])]
            j -= 1
        body: list[str] = []
        k = i + 1
        while k < len(lines) and lines[k].strip() != "```":
            body.append(lines[k][len(indent):] if lines[k].startswith(indent) else lines[k].lstrip())
            k += 1
        if k >= len(lines):
            raise ValueError(f"{name}:{i + 1}: code fence never closed")
        blocks.append(Block(name, i + 1, lang, "\n".join(body) + "\n", markers))
        i = k + 1
    return blocks, session


def shell_commands(text: str) -> list[str]:
    """The commands of a shell block: backslash continuations joined, blank and comment lines dropped."""
    out: list[str] = []
    cur = ""
    for raw in text.splitlines():
        line = raw.strip() if cur else raw.rstrip()
        if line.endswith("\\"):
            cur += line[:-1].rstrip() + " "
            continue
        cur += line
        if cur.strip() and not cur.strip().startswith("#"):
            out.append(cur.strip())
        cur = ""
    return out


@dataclass(frozen=True)
class Ports:
    namesrv: int
    broker: int


def rewrite_ports(text: str, ports: Ports) -> str:
    """Default ports of a local set-up -> the test's: 127.0.0.1:9876 / :10911 and bare 9876 / 10911."""
    text = re.sub(r"(?<![\d])9876(?![\d])", str(ports.namesrv), text)
    return re.sub(r"(?<![\d])10911(?![\d])", str(ports.broker), text)


def rewrite_cluster_init(command: str, namesrv_port: int, broker_port: int) -> str:
    """`orbitmq cluster init [opts] DIR` -> the same on the given base ports (unless the command sets them)."""
    args = shlex.split(command, comments=True)
    if "--namesrv-port" not in args:
        args[3:3] = ["--namesrv-port", str(namesrv_port)]
    if "--broker-port" not in args:
        args[3:3] = ["--broker-port", str(broker_port)]
    return shlex.join(args)


# ---- running -----------------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/spark.md", "docs/operations.md"]
VENV_BIN = Path(sys.executable).parent
BLOCK_TIMEOUT_S = 420
DEV_RUN_TIMEOUT_S = 900  # ./dev run may (re)install the pinned dependencies first

SESSION_RUNNER = """
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for i, (where, code) in enumerate(blocks):
    print(f"=== docs-test block {i}: {where}", flush=True)
    print(f"=== docs-test block {i}: {where}", file=sys.stderr, flush=True)
    try:
        exec(compile(code, where, "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print(f"=== docs-test failed: {i}", flush=True)
        sys.exit(1)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = Standalone(tmp_path_factory.mktemp("docs-orbitmq"))
    try:
        yield s.start()
    finally:
        s.close()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # README: "use the venv (. .venv/bin/activate)"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env.pop("PYTHONPATH", None)
    return env


def _scratch(tmp: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    (work / ".venv").symlink_to(VENV_BIN.parent)
    (work / "examples").symlink_to(ROOT / "examples")
    return work


def _fail(block: Block, what: str, out: str) -> str:
    return f"--- {block.where()}: {what}\n{block.text}--- output (tail)\n{out[-6000:]}"


def _dev_run(command: str, work: Path) -> str | None:
    """`./dev run [args]` on free ports until ready, then SIGTERM; None when it started and stopped cleanly."""
    ns, broker = free_port(), free_broker_port()
    args = shlex.split(command, comments=True)[2:]
    argv = [str(ROOT / "dev"), "run", *args, "--data", str(work / "dev-data"), "--namesrv-port", str(ns),
            "--broker-port", str(broker), "--broker-ip", "127.0.0.1"]
    log = work / "dev-run.log"
    with log.open("wb") as out:
        p = subprocess.Popen(argv, cwd=work, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            deadline = time.monotonic() + DEV_RUN_TIMEOUT_S
            while b"Ready." not in log.read_bytes():
                if p.poll() is not None:
                    return f"./dev run exited with {p.returncode} before it was ready:\n{log.read_text()}"
                if time.monotonic() > deadline:
                    return f"./dev run not ready after {DEV_RUN_TIMEOUT_S} s:\n{log.read_text()}"
                time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            rc = p.wait(60)
            return None if rc == 0 else f"./dev run exited with {rc} after SIGTERM:\n{log.read_text()}"
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)


def _run_shell(block: Block, ports: Ports, work: Path, report: list[str]) -> list[str]:
    failures: list[str] = []
    skipped = block.skipped_lines
    cluster_ports: tuple[int, int] | None = None
    for command in shell_commands(block.text):
        why = next((r for prefix, r in skipped if command.startswith(prefix)), None)
        if why is not None:
            report.append(f"skipped line  {block.where()}: {command}  ({why})")
            continue
        if command.startswith("./dev run"):
            err = _dev_run(command, work)
            report.append(f"ran           {block.where()}: {command}  (free ports, until Ready., SIGTERM)")
            if err is not None:
                failures.append(_fail(block, command, err))
            continue
        cmd = command.replace("./dev ", f"{ROOT / 'dev'} ", 1) if command.startswith("./dev ") else command
        if cmd.startswith("orbitmq cluster init"):
            cluster_ports = (free_port_block(2, 1), free_port_block(4, 10))
            cmd = rewrite_cluster_init(cmd, *cluster_ports)
        target = Ports(cluster_ports[0], cluster_ports[1]) if cluster_ports else ports
        cmd = rewrite_ports(cmd, target)
        r = subprocess.run(["bash", "-c", cmd], cwd=work, env=_env(), capture_output=True, text=True,
                           timeout=BLOCK_TIMEOUT_S, check=False)
        report.append(f"ran           {block.where()}: {cmd}  (exit {r.returncode})")
        if r.returncode != 0:
            failures.append(_fail(block, f"{cmd} exited with {r.returncode}", r.stdout + r.stderr))
            break
    if cluster_ports is not None:  # a block that started a cluster and failed before stopping it
        for d in work.iterdir():
            if d.is_dir() and (d / "namesrv-0").exists():
                subprocess.run([str(VENV_BIN / "orbitmq"), "cluster", "stop", str(d)], cwd=work, env=_env(),
                               capture_output=True, timeout=120, check=False)
    return failures


def _run_python(block: Block, ports: Ports, work: Path, report: list[str]) -> list[str]:
    script = work / f"block_{block.line}.py"
    script.write_text(rewrite_ports(block.text, ports))
    r = subprocess.run([sys.executable, str(script)], cwd=work, env=_env(), capture_output=True, text=True,
                       timeout=BLOCK_TIMEOUT_S, check=False)
    report.append(f"ran           {block.where()}  (exit {r.returncode})")
    return [] if r.returncode == 0 else [_fail(block, f"exited with {r.returncode}", r.stdout + r.stderr)]


def _run_session(blocks: list[Block], ports: Ports, work: Path, report: list[str]) -> list[str]:
    spec = work / "session.json"
    spec.write_text(json.dumps([[b.where(), rewrite_ports(b.text, ports)] for b in blocks]))
    runner = work / "session_runner.py"
    runner.write_text(SESSION_RUNNER)
    r = subprocess.run([sys.executable, str(runner), str(spec)], cwd=work, env=_env(), capture_output=True,
                       text=True, timeout=BLOCK_TIMEOUT_S * 2, check=False)
    failed = next((int(ln.split(":")[1]) for ln in r.stdout.splitlines()
                   if ln.startswith("=== docs-test failed:")), None)
    for i, b in enumerate(blocks):
        state = "failed" if failed == i else "not reached" if failed is not None and i > failed else "ok"
        report.append(f"ran           {b.where()}  (one session: {state})")
    if r.returncode == 0:
        return []
    culprit = blocks[failed] if failed is not None and failed < len(blocks) else blocks[0]
    return [_fail(culprit, f"session exited with {r.returncode}", r.stdout + r.stderr)]


@pytest.mark.integration
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("doc", DOCS)
def test_doc_blocks_run(doc: str, server: Standalone, tmp_path: Path) -> None:
    path = ROOT / doc
    assert path.exists(), f"{doc} is missing"
    blocks, session = parse(path, doc)
    ports = Ports(server.namesrv_port, server.broker_port)
    work = _scratch(tmp_path)
    report: list[str] = []
    failures: list[str] = []
    to_run: list[Block] = []
    for b in blocks:
        if b.kind == "text":
            report.append(f"text          {b.where()}")
        elif b.skip_reason is not None:
            report.append(f"skipped       {b.where()}: {b.skip_reason}")
        else:
            to_run.append(b)
    python = [b for b in to_run if b.kind == "python"]
    if session and python:
        failures += _run_session(python, ports, work, report)
    else:
        for b in python:
            failures += _run_python(b, ports, work, report)
    for b in to_run:
        if b.kind == "shell":
            failures += _run_shell(b, ports, work, report)
    summary = (f"{doc}: {len(to_run)} blocks run, {sum(1 for b in blocks if b.kind != 'text' and b.skip_reason)} "
               f"skipped by marker, {sum(1 for b in blocks if b.kind == 'text')} text")
    print("\n".join([summary, *report]))
    assert not failures, summary + "\n" + "\n\n".join(failures)


def test_parser_markers_indent_and_rewrites(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- docs-test: python blocks share one session -->\n"
        "```sh\n./dev run   # start\n./dev test\n```\n"
        "- item\n\n   <!-- docs-test: skip needs a cluster -->\n   ```bash\n   spark-submit \\\n     --master x\n   ```\n"
        "<!-- docs-test: skip-line ./dev test | the suite itself -->\n"
        "```python\nprint('127.0.0.1:9876', 10911)\n```\n```yaml\na: 1\n```\n")
    blocks, session = parse(doc, "doc.md")
    assert session and [b.kind for b in blocks] == ["shell", "shell", "python", "text"]
    assert shell_commands(blocks[0].text) == ["./dev run   # start", "./dev test"]
    assert blocks[1].skip_reason == "needs a cluster" and blocks[1].line == 9
    assert shell_commands(blocks[1].text) == ["spark-submit --master x"]
    assert blocks[2].skipped_lines == [("./dev test", "the suite itself")] and blocks[2].skip_reason is None
    assert rewrite_ports(blocks[2].text, Ports(1234, 5678)) == "print('127.0.0.1:1234', 5678)\n"
    assert rewrite_cluster_init("orbitmq cluster init ./c", 20000, 30000) == \
        "orbitmq cluster init --broker-port 30000 --namesrv-port 20000 ./c"


OUTSIDE = re.compile(r"/work/|\.\./shared|shared/(reference|design)/|closing notes of each issue|\(`issues`\)")
LINK = re.compile(r"\]\((?!https?:|mailto:|#)(?P<target>[^)\s#]+)(?:#[^)]*)?\)")


def test_docs_stand_alone() -> None:
    """Issue 17 item 4: README.md and docs/** name nothing outside the repository, and their relative links lead
    to files of the repository."""
    problems: list[str] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        rel = path.relative_to(ROOT)
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                problems.append(f"{rel}:{no}: refers outside the repository: {line.strip()}")
            for m in LINK.finditer(line):
                target = (path.parent / m.group("target")).resolve()
                if not target.is_relative_to(ROOT) or not target.exists():
                    problems.append(f"{rel}:{no}: link to a missing file: {m.group('target')}")
    assert problems == [], "\n".join(problems)
