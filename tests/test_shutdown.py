"""An engine process ends with the process that started it, however that one ends: SIGTERM as a
normal exit (``exit_on_sigterm``) and SIGKILL through the vLLM plugin hook ``end_with_parent``,
both exercised here without vLLM (tests/test_vllm.py kills a real engine's starter with SIGKILL)."""

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from ragteam.nodes.shutdown import PARENT_MARK

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

# a process standing for an engine process: runs the hook, reports, then waits to be ended
ENGINE_PROCESS = textwrap.dedent("""
    import ctypes, os, sys, time
    from ragteam.nodes.shutdown import PARENT_MARK, end_with_parent
    end_with_parent()
    asked = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(asked), 0, 0, 0)  # PR_GET_PDEATHSIG
    print(asked.value, repr(os.environ.get(PARENT_MARK)), flush=True)
    time.sleep(float(sys.argv[1]))
""")


def run_engine_process(mark: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != PARENT_MARK}
    if mark is not None:
        env[PARENT_MARK] = mark
    done = subprocess.run([sys.executable, "-c", ENGINE_PROCESS, "0"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_direct_child_of_the_marked_process_asks_to_end_with_it_and_marks_its_own_children():
    asked, mark = run_engine_process(str(os.getpid()))
    assert int(asked) == signal.SIGKILL
    assert mark not in (repr(str(os.getpid())), "None")  # now its own pid, for the processes it starts


@pytest.mark.parametrize("mark", [None, "", "1", "not-a-pid"])
def test_any_other_process_is_left_alone(mark):
    """No mark (a vLLM engine ragteam did not start), or a mark that names another process (a Ray
    worker whose raylet inherited it): nothing asked, the mark unchanged."""
    asked, *rest = run_engine_process(mark)
    assert int(asked) == 0
    assert rest == [repr(mark)]


STARTER = textwrap.dedent("""
    import os, subprocess, sys
    from ragteam.nodes.shutdown import PARENT_MARK
    os.environ[PARENT_MARK] = str(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], "600"], stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    print(child.pid, flush=True)
    child.wait()
""")


def test_a_starter_killed_by_sigkill_takes_its_engine_process_with_it():
    """SIGKILL runs no handler and no atexit hook in the starter: only the kernel can end the
    engine process, as it asked."""
    starter = subprocess.Popen([sys.executable, "-c", STARTER, ENGINE_PROCESS], stdout=subprocess.PIPE, text=True)
    engine = None
    try:
        engine = psutil.Process(int(starter.stdout.readline()))
        starter.kill()
        starter.wait(timeout=30)
        _, alive = psutil.wait_procs([engine], timeout=30)  # not our child: no exit status to read
        assert not alive
    finally:
        starter.kill()
        if engine is not None and engine.is_running():
            engine.kill()


TERMINATED = textwrap.dedent("""
    import atexit, sys, time
    from ragteam.nodes.shutdown import exit_on_sigterm
    exit_on_sigterm()
    atexit.register(lambda: open(sys.argv[1], "w").write("closed"))  # as VLLMPolicy.start registers close
    print("ready", flush=True)
    time.sleep(600)
""")


def test_sigterm_is_a_normal_exit_whose_exit_hooks_run(tmp_path):
    """``kill``, ``timeout`` or a CI runner stopping a process that started an engine: the exit
    hooks run (the engine's ``close``), and the status says SIGTERM (128 + 15)."""
    marker = tmp_path / "closed"
    process = subprocess.Popen([sys.executable, "-c", TERMINATED, str(marker)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
        assert marker.read_text() == "closed"
    finally:
        process.kill()
