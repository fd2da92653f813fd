"""``python -m tools.controlplane up|down|status``: the command behind
``make cluster-up`` and ``make cluster-down``.

``up`` returns once the control plane is ready and leaves it running; ``down`` stops it and
removes its folder. Errors are one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from airflow_k8s_retry_testing.scenario import Scenario, ScenarioError
from tools.controlplane.cluster import ControlPlane, ControlPlaneError
from tools.controlplane.stages import check_supported


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.controlplane")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a control plane and wait until it is ready")
    up.add_argument("--bin", required=True, type=Path, help="folder with the built binaries")
    up.add_argument("--dir", default=Path(".cluster"), type=Path, help="state folder (default .cluster)")
    up.add_argument("--scenario", default=None, help="scenario YAML/JSON file")
    up.add_argument("--nodes", default=3, type=int, help="how many KWOK nodes (default 3)")
    up.add_argument("--port", default=None, type=int, help="kube-apiserver port (default: a free one)")
    up.add_argument("--timeout", default=300.0, type=float, help="seconds to wait for readiness")
    down = sub.add_parser("down", help="stop the control plane and remove its folder")
    down.add_argument("--dir", default=Path(".cluster"), type=Path)
    status = sub.add_parser("status", help="say whether a control plane runs from the folder")
    status.add_argument("--dir", default=Path(".cluster"), type=Path)
    harness = sub.add_parser(
        "harness", help="play the scenario's disruptions, registry outages and logs (started by 'up')"
    )
    harness.add_argument("--dir", default=Path(".cluster"), type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            scenario = Scenario.load(args.scenario) if args.scenario else Scenario()
            if args.scenario:  # name the file in the message, as the scenario's own errors do
                check_supported(scenario, where=Path(args.scenario).name)
            port = args.port if args.port is not None else _env_port()
            cp = ControlPlane(args.dir, args.bin, scenario, nodes=args.nodes, apiserver_port=port)
            cp.start(timeout=args.timeout)
            print(f"controlplane: ready at {cp.server}; export KUBECONFIG={cp.kubeconfig.resolve()}")
        elif args.command == "down":
            stopped = ControlPlane.stop_in(args.dir)
            print(f"controlplane: stopped {', '.join(stopped)}" if stopped else "controlplane: nothing ran")
        elif args.command == "harness":
            from tools.controlplane.harness import run_forever

            state = json.loads((args.dir / "state.json").read_text())
            run_forever(args.dir.absolute(), Scenario.from_dict(state["scenario"]))
        else:
            running = ControlPlane.attach(args.dir)
            if running is None:
                print(f"controlplane: not running from {args.dir}")
                return 1
            print(f"controlplane: running at {running.server}; KUBECONFIG={running.kubeconfig.resolve()}")
    except (ControlPlaneError, ScenarioError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


def _env_port() -> int | None:
    raw = os.environ.get("APISERVER_PORT", "")
    if not raw:
        return None
    if not raw.isdigit():
        raise ControlPlaneError(f"controlplane: APISERVER_PORT={raw!r} is not a port number")
    return int(raw)


if __name__ == "__main__":
    sys.exit(main())
