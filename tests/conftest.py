"""Test session set-up: nothing writes to ~ or tries the network."""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import contextlib  # noqa: E402
import functools  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# schedlab.flows keeps its data ($SCHEDLAB_HOME: MLflow store, PREFECT_HOME) in a temporary folder
# during tests, never in the checkout or in ~ (set before anything imports schedlab.flows).
os.environ.setdefault("SCHEDLAB_HOME", tempfile.mkdtemp(prefix="schedlab-test-home-"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    # A pytest-xdist worker (``-n``, the default in pyproject.toml) is a process of its own that inherits
    # the controller's environment, its homes included: it takes stores of its own, as a serial run has.
    worker = os.environ["PYTEST_XDIST_WORKER"]
    os.environ["SCHEDLAB_HOME"] = tempfile.mkdtemp(prefix=f"schedlab-test-home-{worker}-")
    os.environ.pop("PREFECT_HOME", None)


def _compile_the_package() -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` set (as in some CI images), no process writes ``__pycache__``,
    so each of the suite's ~700 Python processes (commands, Dask workers, fork servers) compiled the
    schedlab modules it imports from source again: 0.2-0.4 CPU-s a process. The session compiles them
    once, before any worker starts (a process still reads compiled files with the variable set); the
    caches are ignored by git and checked against each source's time stamp as usual. Measured: the whole
    suite took 75 CPU-s (36 s) less."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for path in root.iterdir():  # the package's folders and modules, not the virtual environment's
        if path.is_dir() and (path / "__init__.py").is_file():
            compileall.compile_dir(path, quiet=1)
        elif path.suffix == ".py":
            compileall.compile_file(path, quiet=1)


if sys.dont_write_bytecode:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _compile_the_package()
    sys.dont_write_bytecode = False  # and pytest keeps the test modules' rewritten code: 5 CPU-s a collection

# the test session is an entry point: it applies the project's settings once, before any test imports
# prefect or mlflow (importing schedlab.flows / schedlab.tasks changes nothing: tests/test_settings_env.py)
from schedlab.settings import Settings  # noqa: E402

Settings.from_env().apply().prefect_ready()

# A runner started in the background by a non-interactive shell ignores SIGINT; its children would
# inherit that and never see the Ctrl-C the process tests send them (tests/test_flows_ui.py,
# test_flows_serve.py). Take the default back, as a run from a terminal has.
import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def prefect_harness(seed_home, tmp_path_factory):
    """One Prefect API server for the session's in-process flows, what Prefect's ``prefect_test_harness``
    starts, but as a flow starts its own (:func:`schedlab.flows.api_server.prefect_api`) on a copy of the
    session's migrated database: the harness migrated a new one and imported Prefect's server code into
    the test process (10 CPU-s a worker against 5)."""
    from prefect.context import _temporary_global_settings_context, get_settings_context
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings
    from schedlab.flows.api_server import prefect_api, wait_for_api

    home = seed_home(tmp_path_factory.mktemp("prefect-harness"), mlflow=False) / "prefect"
    # its own server whatever PREFECT_API_URL says, as the harness
    with temporary_settings({PREFECT_HOME: home}, restore_defaults={PREFECT_API_URL}), prefect_api() as started:
        wait_for_api(started)
        with _temporary_global_settings_context(get_settings_context()):  # threads started without this context
            yield


class _StoreTemplates:
    """The empty stores a first command creates, each built once, when a test first asks for it:
    ``mlflow.db`` (MLflow's schema, by ``tracking.check_tracking``) and ``prefect/prefect.db``
    (Prefect's, by ``prefect server database upgrade``, in a process of its own so that this one's
    Prefect settings stay as they are). Each takes seconds of migrations."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextlib.contextmanager
    def _building(self, name: str) -> Iterator[bool]:
        """Under a lock: whether ``name`` is still to be built (the first process of the session builds it)."""
        from schedlab.tasks.locks import file_lock

        with file_lock(self.root / f"{name}.building", what=f"the session's empty {name}", timeout=600):
            yield not (self.root / f"{name}.done").exists()
            (self.root / f"{name}.done").touch()

    @functools.cached_property
    def mlflow_db(self) -> Path:
        from schedlab.tasks import tracking

        with self._building("mlflow.db") as build:
            if build:
                tracking.check_tracking(f"sqlite:///{self.root / 'mlflow.db'}")
        return self.root / "mlflow.db"

    @functools.cached_property
    def prefect_db(self) -> Path:
        with self._building("prefect.db") as build:
            if build:
                self._build_prefect_db()
        return self.root / "prefect" / "prefect.db"

    def _build_prefect_db(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=str(self.root / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
        done = subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], env=env,
                              capture_output=True, text=True, timeout=300)
        db = self.root / "prefect" / "prefect.db"
        assert done.returncode == 0 and db.is_file(), (done.stdout + done.stderr)[-3000:]


@pytest.fixture(scope="session")
def seed_home(tmp_path_factory):
    """``seed_home(home, prefect=True, mlflow=True)``: ``home`` holds the empty stores a first command
    would create (the MLflow store ``mlflow.db``; with ``prefect``, the Prefect API's database
    ``prefect/prefect.db``, where ``$SCHEDLAB_HOME`` or a ``PREFECT_HOME`` of ``home/prefect`` puts it),
    copied from templates built once a session instead of migrated again in every test. For tests whose
    subject is not the stores' creation (``test_footprint.py``, ``test_tracking_store_race.py`` and the
    UI's store in ``test_flows_serve.py`` keep creating them); returns ``home``."""
    # one set for the session's workers (pytest-xdist's share the parent of their base folders)
    base = tmp_path_factory.getbasetemp()
    templates = _StoreTemplates((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "store-templates")

    def seed(home: Path, prefect: bool = True, mlflow: bool = True) -> Path:
        home.mkdir(parents=True, exist_ok=True)
        if mlflow:
            shutil.copy2(templates.mlflow_db, home / "mlflow.db")
        if prefect:
            (home / "prefect").mkdir(exist_ok=True)
            shutil.copy2(templates.prefect_db, home / "prefect" / "prefect.db")
        return home

    return seed


# The longest modules first: with `--dist loadscope --no-loadscope-reorder` each module runs whole on one
# worker, in the order collected, so a long module collected last would run alone at the end while the
# other worker idles (xdist's own order, the modules with the most tests first, did just that). The
# seconds each module took are in tests/module_seconds.json (python -m schedlab.tools.test_durations
# refreshes them from a run's JUnit XML); a module not listed counts as DEFAULT_MODULE_S.
DEFAULT_MODULE_S = 30.0


def pytest_collection_modifyitems(config, items):
    import json

    listed = Path(__file__).with_name("module_seconds.json")
    seconds = json.loads(listed.read_text()) if listed.exists() else {}
    items.sort(key=lambda item: -seconds.get(item.path.name, DEFAULT_MODULE_S))  # stable: a module's order kept
