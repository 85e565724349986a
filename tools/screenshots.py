"""Screenshots in headless Chromium of what a researcher looks at: the MLflow UI during and after the
quickstart (``ui``), and the reproduction report opened from disk (``report``). Not run in CI.

Both need playwright (``pip install playwright`` in any virtual environment; ``playwright install`` is
not needed: a Chromium executable is given with ``--chromium``, e.g. ``/usr/bin/chromium``) and import
nothing of schedlab, so they run from the checkout with that interpreter::

    python -m venv /tmp/pw && /tmp/pw/bin/pip install playwright
    /tmp/pw/bin/python tools/screenshots.py ui --python .venv/bin/python --chromium /usr/bin/chromium --out /tmp/screens
    /tmp/pw/bin/python tools/screenshots.py report DIR OUT.png [--chromium /usr/bin/chromium]

``ui`` starts ``schedlab ui --port 5077`` (with ``--python``, the interpreter that has schedlab) on a
scratch ``$SCHEDLAB_HOME``, then runs ``schedlab experiment quickstart`` in the background and, while
it runs, opens the link it prints as soon as the first replay has finished; it checks that every link
printed uses the port ``schedlab ui`` serves and that the classic runs view has a policy row with
``avg_jct_h`` within 60 s of the first finished replay. Screenshots, in ``--out``:

- ``1-live-runs-table.png``: the printed link while the experiment runs (classic runs view, one row
  per policy with its done/running/queued replays);
- ``2-live-parent-run.png``: the comparison (parent) run's overview while it runs, description
  expanded (who leads, the bars once the baseline has a finished replay, the table);
- ``3-live-comparison-html.png``: its ``comparison.html`` at that moment (downloaded, opened offline);
- ``4-runs-table.png``, ``5-runs-chart.png``: the runs view and its chart view after the experiment;
- ``6-parent-run-first-screen.png``: the parent run's overview after it as it opens (the podium:
  MLflow shows 150 px of a description before "Show more");
- ``6b-parent-run-expanded.png``: the same with the description expanded (bars and CDFs inline,
  then the table);
- ``7-comparison-html.png``: the final ``comparison.html`` (full page);
- ``8-experiment-default.png``: the experiment opened without the link's query.

``timings.json`` records when each live screenshot was taken (seconds after the first finished
replay) and whether the experiment was still running.

``report DIR OUT.png`` screenshots the reproduction report (``schedlab reproduce --report DIR``):
``OUT.png`` is the index, full page, and ``OUT-<page>.png`` every other page of ``DIR`` (full page,
1680 px wide).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

#: Chromium without sandbox, GPU, network chatter or first-run UI (the page is on 127.0.0.1)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: the live screenshot must show a policy row this soon after the first finished replay (seconds)
LIVE_WITHIN_S = 60.0


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "SCHEDLAB_HOME": str(home), "DO_NOT_TRACK": "true", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


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


class Experiment:
    """``schedlab experiment CONFIG`` in the background; its output read line by line."""

    def __init__(self, python: str, home: Path, config: str) -> None:
        self.proc = subprocess.Popen([python, "-m", "schedlab.cli", "experiment", config], env=_env(home), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.started = time.monotonic()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put("")

    def wait_for(self, pattern: str, timeout: float) -> re.Match | None:
        """The first line (from now on) matching ``pattern``; None when the output ends or at the timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line == "":
                return None
            if match := re.search(pattern, line):
                return match
        return None

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.running():
            os.killpg(self.proc.pid, signal.SIGINT)
            self.proc.wait(timeout=120)


def _api(base: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def parent_run(base: str, experiment_id: str) -> str:
    runs = _api(base, "runs/search", {"experiment_ids": [experiment_id], "max_results": 5,
                                      "filter": "tags.`schedlab.kind` = 'experiment'"}).get("runs", [])
    if not runs:
        raise SystemExit(f"no comparison run in experiment {experiment_id}")
    return runs[0]["info"]["run_id"]


def download(base: str, run_id: str, path: str, to: Path) -> Path:
    query = urllib.parse.urlencode({"path": path, "run_uuid": run_id})
    with urllib.request.urlopen(f"{base}/get-artifact?{query}", timeout=30) as response:
        to.write_bytes(response.read())
    return to


class Browser:
    def __init__(self, chromium: str, width: int = 1680, height: int = 1050) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._profile = tempfile.mkdtemp(prefix="schedlab-chromium-")  # an empty profile
        self.context = self._pw.chromium.launch_persistent_context(
            self._profile, executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height}, device_scale_factor=1)
        self.page = self.context.new_page()

    def shot(self, url: str, path: Path, settle: float = 6.0, full_page: bool = False,
             wait_text: str | None = None, timeout: float = 60.0, height: int = 1050,
             click: str | None = None) -> float:
        """Open ``url`` in a window ``height`` pixels tall, wait for the UI to render (and for
        ``wait_text`` when given, reloading every 10 s), click the text ``click`` when there is one
        (MLflow's "Show more" of a description), save a screenshot; the seconds spent waiting for
        ``wait_text`` (-1: it never came)."""
        started = time.monotonic()
        self.page.set_viewport_size({"width": 1680, "height": height})
        self.page.goto(url, wait_until="load")
        time.sleep(settle)  # the UI polls (never network-idle); tables and charts render after the data arrives
        _close_side_panels(self.page)
        found = -1.0
        if wait_text:
            last = time.monotonic()
            while time.monotonic() - started < timeout:
                if wait_text in self.page.inner_text("body"):
                    found = time.monotonic() - started
                    break
                if time.monotonic() - last > 10:
                    self.page.reload(wait_until="load")
                    last = time.monotonic()
                    time.sleep(3)
                time.sleep(1)
        if click and self.page.get_by_text(click, exact=True).count():
            self.page.get_by_text(click, exact=True).first.click()
            time.sleep(3)
        self.page.screenshot(path=str(path), full_page=full_page)
        print(f"{path}  <- {url}", flush=True)
        return found

    def close(self) -> None:
        self.context.close()
        self._pw.stop()


def ui(args: argparse.Namespace) -> int:
    """The MLflow UI during and after the quickstart (module doc)."""
    home = args.home or Path(tempfile.mkdtemp(prefix="schedlab-ui-"))
    out = args.out or home / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{args.port}"
    server = start_ui(args.python, home, args.port)
    browser = Browser(args.chromium)
    timings: dict[str, object] = {}
    experiment = None
    try:
        experiment = Experiment(args.python, home, args.config)
        link = experiment.wait_for(r"updated as replays finish: (http://\S+/#/experiments/\S+)", 600)
        if link is None:
            raise SystemExit("the experiment printed no MLflow link:\n" + "".join(experiment.output[-40:]))
        runs_link = link.group(1)
        first = experiment.wait_for(r"\[1/\d+\] ", 1800)  # Prefect prefixes the line
        if first is None:
            raise SystemExit("no replay finished:\n" + "".join(experiment.output[-40:]))
        t0 = time.monotonic()
        timings["first_replay_s"] = round(t0 - experiment.started, 1)
        found = browser.shot(runs_link, out / "1-live-runs-table.png", wait_text="(mean of", timeout=LIVE_WITHIN_S)
        timings["live_runs_table"] = {"after_first_replay_s": round(time.monotonic() - t0, 1),
                                      "policy_row_after_s": round(found, 1), "experiment_running": experiment.running()}
        experiment_id = re.search(r"/experiments/(\d+)", runs_link).group(1)
        parent = parent_run(base, experiment_id)
        parent_link = f"{base}/#/experiments/{experiment_id}/runs/{parent}?workflowType=machine_learning"
        browser.shot(parent_link, out / "2-live-parent-run.png", height=1800, click="Show more")
        live_html = download(base, parent, "comparison.html", out / "live-comparison.html")
        browser.shot(live_html.resolve().as_uri(), out / "3-live-comparison-html.png", settle=1, full_page=True)
        timings["live_parent_and_html"] = {"after_first_replay_s": round(time.monotonic() - t0, 1),
                                           "experiment_running": experiment.running()}
        print(json.dumps(timings), flush=True)
        experiment.proc.wait()
        timings["experiment_s"] = round(time.monotonic() - experiment.started, 1)
        text = "".join(experiment.output)
        (out / "experiment-output.txt").write_text(text)
        links = re.findall(r"(https?://[\w.\-]+(?::\d+)?)/#/", text)  # the MLflow links (not Prefect's own)
        timings["links_printed"] = sorted(set(links))
        timings["all_links_on_port"] = bool(links) and all(u.endswith(f":{args.port}") for u in links)
        if experiment.proc.returncode != 0:
            raise SystemExit(f"experiment failed (exit {experiment.proc.returncode}):\n{text[-4000:]}")
        browser.shot(runs_link, out / "4-runs-table.png")
        browser.shot(runs_link + "&compareRunsMode=CHART", out / "5-runs-chart.png", settle=10, height=1700)
        browser.shot(parent_link, out / "6-parent-run-first-screen.png", settle=10)
        browser.shot(parent_link, out / "6b-parent-run-expanded.png", settle=10, height=4200, click="Show more")
        final_html = download(base, parent, "comparison.html", out / "comparison.html")
        browser.shot(final_html.resolve().as_uri(), out / "7-comparison-html.png", settle=1, full_page=True)
        browser.shot(f"{base}/#/experiments/{experiment_id}", out / "8-experiment-default.png")
    finally:
        (out / "timings.json").write_text(json.dumps(timings, indent=1))
        print(json.dumps(timings, indent=1))
        if experiment is not None:
            experiment.stop()
        browser.close()
        stop_ui(server)
    return 0


def report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Every page of a reproduction report, as a reader opens it from disk (module doc)."""
    index = args.report / "index.html"
    if not index.is_file():
        parser.error(f"{index}: no such file (run `schedlab reproduce ... --report {args.report}` first)")
    if args.out.suffix != ".png":
        parser.error(f"{args.out}: expected a .png path")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pages = [index, *sorted(p for p in args.report.glob("*.html") if p != index)]
    browser = Browser(args.chromium)
    try:
        for page in pages:
            out = args.out if page == index else args.out.with_name(f"{args.out.stem}-{page.stem}.png")
            browser.shot(page.resolve().as_uri(), out, settle=0.5, full_page=True, height=1000)
    finally:
        browser.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    browser = argparse.ArgumentParser(add_help=False)
    browser.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium executable")
    commands = parser.add_subparsers(dest="command", required=True)
    live = commands.add_parser("ui", parents=[browser], help="the MLflow UI during and after the quickstart")
    live.add_argument("--python", default=sys.executable, help="interpreter with schedlab installed")
    live.add_argument("--home", type=Path, help="scratch SCHEDLAB_HOME (default: a new temporary folder)")
    live.add_argument("--config", default="quickstart")
    live.add_argument("--port", type=int, default=5077, help="the port `schedlab ui` serves (every link must use it)")
    live.add_argument("--out", type=Path, help="screenshot folder (default: HOME/screenshots)")
    pages = commands.add_parser("report", parents=[browser], help="every page of a reproduction report (schedlab reproduce --report)")
    pages.add_argument("report", type=Path, help="the report folder (holds index.html)")
    pages.add_argument("out", type=Path, help="PNG for the index; the other pages go beside it as OUT-<page>.png")
    args = parser.parse_args()
    if not Path(args.chromium).is_file():
        parser.error(f"--chromium {args.chromium}: no such file")
    return ui(args) if args.command == "ui" else report(parser, args)


if __name__ == "__main__":
    sys.exit(main())
