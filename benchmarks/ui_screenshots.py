"""Look at the MLflow UI the way a researcher does after the quickstart (issue #12 §2; not in CI).

Runs ``schedlab experiment quickstart`` on a scratch ``$SCHEDLAB_HOME``, starts ``schedlab ui`` over
it, opens the printed links in headless Chromium (playwright) and saves screenshots:

- ``1-runs-table.png``: the link printed by the experiment (classic runs view, one row per policy);
- ``2-runs-chart.png``: the same runs in MLflow's chart view;
- ``3-parent-run.png``: the comparison (parent) run: its note holds the table;
- ``4-headline-plot.png``: the parent run's headline bar plot in the artifact viewer;
- ``5-experiment-default.png``: the experiment opened without the link's query (what a click from
  MLflow's home page shows).

Needs playwright (``pip install playwright`` in any venv) and a Chromium: ``--chromium PATH``
(e.g. ``/usr/bin/chromium`` from the distribution) or playwright's own (``playwright install chromium``)::

    python -m venv /tmp/pw && /tmp/pw/bin/pip install playwright
    /tmp/pw/bin/python benchmarks/ui_screenshots.py --python .venv/bin/python --chromium /usr/bin/chromium
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "SCHEDLAB_HOME": str(home), "DO_NOT_TRACK": "true", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def run_quickstart(python: str, home: Path, config: str) -> tuple[str, str]:
    """Run the experiment; the two MLflow links it prints (runs table, parent run)."""
    started = time.perf_counter()
    proc = subprocess.run([python, "-m", "schedlab.cli", "experiment", config], env=_env(home), text=True,
                          capture_output=True, check=False)
    print(proc.stdout[-6000:])
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"experiment failed (exit {proc.returncode})")
    links = re.findall(r"(http://127\.0\.0\.1:5000/#/\S+)", proc.stdout)
    print(f"experiment: {time.perf_counter() - started:.0f} s")
    return links[0], links[1]


def start_ui(python: str, home: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([python, "-m", "schedlab.cli", "ui", "--port", str(port)], env=_env(home),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_ui(proc)
    raise SystemExit("schedlab ui did not answer /health within 120 s")


def stop_ui(proc: subprocess.Popen) -> None:
    """Stop `schedlab ui` and the MLflow server it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def _close_side_panels(page) -> None:
    """Close MLflow's assistant side panel, which takes a third of the page (as a user would)."""
    for button in page.locator("button[aria-label*='lose' i]").all():
        try:
            box = button.bounding_box()
            if box and box["x"] > page.viewport_size["width"] * 0.6 and box["y"] < 80:
                button.click(timeout=2000)
                time.sleep(1)
                return
        except Exception:  # noqa: BLE001 - a screenshot with the panel is still a screenshot
            return


def screenshots(runs_link: str, parent_link: str, port: int, out: Path, chromium: str | None) -> list[Path]:
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{port}"
    runs_link, parent_link = (u.replace("http://127.0.0.1:5000", base) for u in (runs_link, parent_link))
    experiment_id = re.search(r"/experiments/(\d+)", runs_link).group(1)
    run_id = re.search(r"/runs/([0-9a-f]{32})", parent_link).group(1)
    # the artifacts tab with the plots folder open (the file in the path is not selected: clicked below)
    artifacts = f"{base}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/plots?workflowType=machine_learning"
    pages = [  # (file, page, artifact to click in the tree)
        ("1-runs-table.png", runs_link, None),
        ("2-runs-chart.png", runs_link + "&compareRunsMode=CHART", None),
        ("3-parent-run.png", parent_link, None),
        ("4-headline-plot.png", artifacts, "headline__"),
        ("4b-wait-cdf.png", artifacts, "wait_cdf__"),
        ("5-experiment-default.png", f"{base}/#/experiments/{experiment_id}", None),
    ]
    saved = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1680, "height": 1050})
        for name, url, artifact in pages:
            page.goto(url, wait_until="load")
            time.sleep(8)  # the UI polls (never network-idle); tables and charts render after the data arrives
            _close_side_panels(page)
            if artifact:
                page.get_by_text(artifact).first.click()
                time.sleep(3)
            path = out / name
            page.screenshot(path=str(path), full_page=False)
            print(f"{path}  <- {url}")
            saved.append(path)
        browser.close()
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="interpreter with schedlab installed")
    parser.add_argument("--chromium", help="Chromium executable (default: playwright's own)")
    parser.add_argument("--home", type=Path, help="scratch SCHEDLAB_HOME (default: a new temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="--home already holds the experiment: do not run it")
    parser.add_argument("--config", default="quickstart")
    parser.add_argument("--out", type=Path, help="screenshot folder (default: HOME/screenshots)")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="schedlab-ui-"))
    out = args.out or home / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    links_file = home / "links.txt"
    if args.reuse and links_file.exists():
        runs_link, parent_link = links_file.read_text().split()
    else:
        runs_link, parent_link = run_quickstart(args.python, home, args.config)
        links_file.write_text(f"{runs_link}\n{parent_link}\n")
    port = _free_port()
    ui = start_ui(args.python, home, port)
    try:
        screenshots(runs_link, parent_link, port, out, args.chromium)
    finally:
        stop_ui(ui)
    return 0


if __name__ == "__main__":
    sys.exit(main())
