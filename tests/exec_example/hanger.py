"""An exec backend that never answers: it starts a child and both sleep (also on --list-supported).

With HANGER_PIDS=FILE it appends the pids of both to FILE, so a test can check they were killed;
a confined worker's command (--jobs) cannot write outside its private directory, and then does not.
"""
import os
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
if os.environ.get("HANGER_PIDS"):
    try:
        with open(os.environ["HANGER_PIDS"], "a") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
    except PermissionError:
        pass
print("hanger: waiting for the device", file=sys.stderr, flush=True)
time.sleep(120)
