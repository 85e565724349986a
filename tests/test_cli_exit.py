"""A ``schedlab`` process ends without collecting its whole heap at exit (``cli._skip_exit_collection``):
the exit handlers the command's libraries register still run, then the heap is frozen."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_command_freezes_its_heap_after_the_other_exit_handlers(tmp_path):
    script = textwrap.dedent("""\
        import atexit, gc, sys
        atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))  # runs after main's
        from schedlab.cli import main
        code = main(["policies"])
        atexit.register(lambda: print("library handler ran, frozen:", gc.get_freeze_count() > 0))
        registered = atexit._ncallbacks()
        main(["policies"])
        print("registered by a second call:", atexit._ncallbacks() - registered)
        sys.exit(code)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-3:] == ["registered by a second call: 0", "library handler ran, frozen: False",
                          "frozen at exit: True"], lines[-5:]
