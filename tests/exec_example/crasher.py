"""An exec backend that dies: `crasher.py --signal|--exit REQUEST RESPONSE` (also on --list-supported)."""
import os
import signal
import sys

print("crasher: device lost at step 3", file=sys.stderr, flush=True)
if "--signal" in sys.argv:
    os.kill(os.getpid(), signal.SIGSEGV)
sys.exit(3)
