"""`python -m kiln.viz SCRIPT [ARGS...]` runs a script with tracing and profiling on, then serves what it recorded;
`python -m kiln.viz --open PATH...` serves saved files (a kiln-viz directory, a trace.json or a profile.json)."""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
import tempfile
import webbrowser

from kiln.uops import knobs, trace
from kiln.viz.server import VizServer

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.viz",
        description="Browse kiln's rewrite traces, kernels and profile timeline in a local web page.",
    )
    parser.add_argument("--open", nargs="+", metavar="PATH", help="serve saved files instead of running a script")
    parser.add_argument("--port", type=int, default=knobs.VIZ_PORT, help="port (default VIZ_PORT, 8000; 0: any)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1); requests must name 127.0.0.1, localhost or this address",
    )
    parser.add_argument("--out", help="directory for a script's files (default: a new temporary directory)")
    parser.add_argument("--no-browser", action="store_true", help="never open a browser")
    parser.add_argument("script", nargs="?", help="a Python script to run with VIZ=1 and PROFILE=1")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return parser


def _run_script(script: str, arguments: list[str], out: str) -> int:
    environment = dict(os.environ, VIZ="1", PROFILE="1", VIZ_SERVE="0", VIZ_OUT=out)
    print(f"kiln.viz: running {script} with VIZ=1 PROFILE=1 (files in {out})", file=sys.stderr)
    return subprocess.run([sys.executable, script, *arguments], env=environment, check=False).returncode


def _has_display() -> bool:
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _bind(paths: list[str], host: str, port: int) -> VizServer:
    try:
        return VizServer(list(paths), host, port)
    except OSError as error:
        if error.errno != errno.EADDRINUSE or port == 0:
            raise
        server = VizServer(list(paths), host, 0)
        print(f"kiln.viz: port {port} is in use; serving on port {server.port} instead", file=sys.stderr)
        return server


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    trace.disable_exit_output()  # VIZ=1 inherited from a traced script must not make this process write or serve
    options = _parser().parse_args(argv)
    if (options.open is None) == (options.script is None):
        _parser().error("give either a SCRIPT to run or --open PATH")
    if options.port < 0 or options.port > 65535:
        _parser().error(f"--port must be 0..65535, got {options.port}")
    status = 0
    if options.open is not None:
        paths = options.open
    else:
        if not os.path.isfile(options.script):
            _parser().error(f"no such script: {options.script}")
        out = options.out or tempfile.mkdtemp(prefix="kiln-viz-")
        os.makedirs(out, exist_ok=True)
        status = _run_script(options.script, options.args, out)
        if status != 0:
            print(f"kiln.viz: {options.script} exited with status {status}; serving what it recorded", file=sys.stderr)
        if not any(os.path.exists(os.path.join(out, name)) for name in ("trace.json", "profile.json")):
            print(f"kiln.viz: {options.script} wrote no trace (does it import kiln?)", file=sys.stderr)
            return status or 1
        paths = [out]
    server = _bind(paths, options.host, options.port)
    if server.error is not None:
        print(f"kiln.viz: {server.error}", file=sys.stderr)
    print(f"kiln.viz: serving {server.url} (Ctrl-C to stop)", flush=True)
    if not options.no_browser and _has_display():
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("kiln.viz: stopped", file=sys.stderr)
    finally:
        server.httpd.server_close()
    return status


if __name__ == "__main__":
    sys.exit(main())
