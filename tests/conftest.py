"""Test session set-up: nothing writes to ~ or tries the network."""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import functools  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
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
def prefect_harness():
    """One Prefect test harness (a temporary API server and database) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


class _StoreTemplates:
    """The empty stores a first command creates, each built once, when a test first asks for it:
    ``mlflow.db`` (MLflow's schema, by ``tracking.check_tracking``) and ``prefect/prefect.db``
    (Prefect's, by ``prefect server database upgrade``, in a process of its own so that this one's
    Prefect settings stay as they are). Each takes seconds of migrations."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @functools.cached_property
    def mlflow_db(self) -> Path:
        from schedlab.tasks import tracking

        tracking.check_tracking(f"sqlite:///{self.root / 'mlflow.db'}")
        return self.root / "mlflow.db"

    @functools.cached_property
    def prefect_db(self) -> Path:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=str(self.root / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
        done = subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], env=env,
                              capture_output=True, text=True, timeout=300)
        db = self.root / "prefect" / "prefect.db"
        assert done.returncode == 0 and db.is_file(), (done.stdout + done.stderr)[-3000:]
        return db


@pytest.fixture(scope="session")
def seed_home(tmp_path_factory):
    """``seed_home(home, prefect=True, mlflow=True)``: ``home`` holds the empty stores a first command
    would create (the MLflow store ``mlflow.db``; with ``prefect``, the Prefect API's database
    ``prefect/prefect.db``, where ``$SCHEDLAB_HOME`` or a ``PREFECT_HOME`` of ``home/prefect`` puts it),
    copied from templates built once a session instead of migrated again in every test. For tests whose
    subject is not the stores' creation (``test_footprint.py``, ``test_tracking_store_race.py`` and the
    UI's store in ``test_flows_serve.py`` keep creating them); returns ``home``."""
    templates = _StoreTemplates(tmp_path_factory.mktemp("store-templates"))

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
