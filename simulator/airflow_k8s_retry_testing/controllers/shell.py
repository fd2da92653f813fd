"""``pods/exec`` over a websocket, with just enough of a shell for the XCom sidecar convention.

The cncf provider reads a task's result by exec-ing into the ``airflow-xcom-sidecar`` container
(``/bin/sh -c 'if [ -s /airflow/xcom/return.json ]; then cat ...'``) and then stops the sidecar by
writing ``kill -2 ...`` to a shell's stdin. This module speaks the ``v4.channel.k8s.io`` and
``v5.channel.k8s.io`` protocols (one leading byte per frame: 0 stdin, 1 stdout, 2 stderr,
3 status; v5 adds 255 for "stdin closed", which ``kubectl exec -i`` sends) and interprets those commands
plus a few simple ones (``cat``, ``echo``, ``true``, ``false``, ``exit``); anything else answers
``not found`` with exit code 127, as a minimal image would.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from typing import Any

from aiohttp import WSMessage, WSMsgType, web

from airflow_k8s_retry_testing.controllers.runs import SIDECAR, XCOM_PATH, PodRun

#: Signal the container's main process; its exit code if that stopped it (the kubelet's ``kill``).
Signal = Callable[[int], int | None]

STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255
SHELLS = {"sh", "/bin/sh", "bash", "/bin/bash", "ash", "/bin/ash"}
EMPTY_MARKER = "__airflow_xcom_result_empty__"
SIGNALS = {"INT": 2, "SIGINT": 2, "TERM": 15, "SIGTERM": 15, "KILL": 9, "SIGKILL": 9, "HUP": 1, "SIGHUP": 1}


class Outcome:
    """What one command line produced."""

    def __init__(self) -> None:
        self.stdout = ""
        self.stderr = ""
        self.code = 0
        self.killed = False  # the container's main process was signalled: the session ends


def _signal(args: list[str]) -> int:
    for i, arg in enumerate(args):
        if arg == "-s" and i + 1 < len(args):
            return SIGNALS.get(args[i + 1].upper(), 15)
        if arg.startswith("-") and arg[1:].isdigit():
            return int(arg[1:])
        if arg.startswith("-") and arg[1:].upper() in SIGNALS:
            return SIGNALS[arg[1:].upper()]
    return 15


def xcom_file(run: PodRun) -> str:
    """The content of /airflow/xcom/return.json: the main containers' scenario ``run.xcom``."""
    for c in run.main:
        if c.name != SIDECAR and c.xcom is not None:
            return json.dumps(c.xcom)
    return ""


def interpret(script: str, run: PodRun, signal: Signal) -> Outcome:
    """Run one shell command line against the simulated container."""
    out = Outcome()
    xcom = xcom_file(run)
    if re.search(r"(^|[;&|\s])kill(\s|$)", script):
        # Whatever the target expression (pid 1, $(pgrep ...), a /proc loop), it hits the main process.
        args = (
            shlex.split(script.split("kill", 1)[1].split(";", 1)[0].split("$(", 1)[0])
            if "kill" in script
            else []
        )
        code = signal(_signal(args))
        out.killed = code is not None
        return out
    if "return.json" in script and "[ -s" in script:
        out.stdout = xcom if xcom else EMPTY_MARKER + "\n"
        return out
    for raw_part in re.split(r";|&&|\n", script):
        part = raw_part.strip()
        if not part:
            continue
        try:
            argv = shlex.split(part)
        except ValueError as exc:
            out.stderr += f"sh: syntax error: {exc}\n"
            out.code = 2
            return out
        if _command(argv, out, run, xcom) or (out.code and "&&" in script):
            return out
    return out


def _command(argv: list[str], out: Outcome, run: PodRun, xcom: str) -> bool:
    """Run one simple command into ``out``; True when the shell exits."""
    cmd, args = argv[0], argv[1:]
    if cmd == "cat":
        for path in args:
            if path == XCOM_PATH and any(c.name == SIDECAR for c in run.containers):
                out.stdout += xcom
            else:
                out.stderr += f"cat: can't open '{path}': No such file or directory\n"
                out.code = 1
    elif cmd == "echo":
        out.stdout += " ".join(args) + "\n"
    elif cmd in ("true", "false"):
        out.code = 0 if cmd == "true" else 1
    elif cmd == "exit":
        out.code = int(args[0]) if args and args[0].isdigit() else 0
        return True
    elif cmd == "hostname":
        out.stdout += run.name + "\n"
    else:
        out.stderr += f"sh: {cmd}: not found\n"
        out.code = 127
    return False


def _status(code: int, command: list[str]) -> bytes:
    if code == 0:
        body: dict[str, Any] = {"metadata": {}, "status": "Success"}
    else:
        body = {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command {command}, "
            f"exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    return bytes([ERROR]) + json.dumps(body).encode()


async def _send(ws: web.WebSocketResponse, outcome: Outcome) -> None:
    if outcome.stdout:
        await ws.send_bytes(bytes([STDOUT]) + outcome.stdout.encode())
    if outcome.stderr:
        await ws.send_bytes(bytes([STDERR]) + outcome.stderr.encode())


async def run_exec_session(
    ws: web.WebSocketResponse, run: PodRun, command: list[str], *, stdin: bool, signal: Signal
) -> None:
    """Serve one exec into a container of ``run``: a one-shot command, or a shell reading command
    lines from stdin; ``signal`` is what a ``kill`` in it does."""
    interactive = command[0] in SHELLS and "-c" not in command[1:]
    if not interactive:
        if command[0] in SHELLS:
            script = command[command.index("-c", 1) + 1] if command.index("-c", 1) + 1 < len(command) else ""
        else:
            script = shlex.join(command)
        outcome = interpret(script, run, signal)
        await _send(ws, outcome)
        await ws.send_bytes(_status(outcome.code, command))
        return
    if not stdin:
        await ws.send_bytes(_status(0, command))
        return
    await _shell(ws, run, command, signal)


def _frame(message: WSMessage) -> tuple[int, str] | None:
    """(channel, payload) of a websocket message, or None when the session ends."""
    if message.type == WSMsgType.BINARY:
        data: bytes = message.data
        return data[0], data[1:].decode("utf-8", "replace")
    if message.type == WSMsgType.TEXT:
        text: str = message.data
        return (ord(text[0]) if text else -1), text[1:]
    return None


async def _shell(ws: web.WebSocketResponse, run: PodRun, command: list[str], signal: Signal) -> None:
    """A shell reading command lines from stdin until ``exit``, a kill, or stdin closes."""
    buffer = ""
    async for message in ws:
        frame = _frame(message)
        if frame is None:
            break
        channel, payload = frame
        if channel == CLOSE and payload[:1] in ("\x00", ""):
            # v5: the client closed stdin; whatever the shell read so far is all it gets.
            outcome = interpret(buffer, run, signal) if buffer.strip() else Outcome()
            await _send(ws, outcome)
            await ws.send_bytes(_status(outcome.code, command))
            return
        if channel != STDIN:
            continue
        buffer += payload
        while "\n" in buffer:
            line, buffer = buffer.split("\n", 1)
            outcome = interpret(line, run, signal)
            await _send(ws, outcome)
            if outcome.killed or line.strip().startswith("exit"):
                await ws.send_bytes(_status(outcome.code, command))
                return
