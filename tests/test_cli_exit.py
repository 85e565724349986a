"""A ``schedlab`` process and a Dask worker that ran a replay's warm-up end without collecting their whole
heap at exit (``settings.skip_exit_collection``): the exit handlers the libraries register later still
run, then the heap is frozen."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(script: str, tmp_path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_a_command_freezes_its_heap_after_the_other_exit_handlers(tmp_path):
    lines = _run("""\
        import atexit, gc, sys
        atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))  # runs after main's
        from schedlab.cli import main
        code = main(["policies"])
        atexit.register(lambda: print("library handler ran, frozen:", gc.get_freeze_count() > 0))
        registered = atexit._ncallbacks()
        main(["policies"])
        print("registered by a second call:", atexit._ncallbacks() - registered)
        sys.exit(code)
        """, tmp_path)
    assert lines[-3:] == ["registered by a second call: 0", "library handler ran, frozen: False",
                          "frozen at exit: True"], lines[-5:]


@pytest.mark.slow
def test_a_warmed_up_worker_freezes_its_heap_at_exit(tmp_path, seed_home):
    home = seed_home(tmp_path / "home", prefect=False)
    lines = _run(f"""\
        import atexit, gc, os
        atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
        from schedlab.tasks.replay import warm_up
        print("warmed up:", warm_up("sqlite:///{home / 'mlflow.db'}") == os.getpid())
        """, tmp_path)
    assert lines[-2:] == ["warmed up: True", "frozen at exit: True"], lines[-5:]
