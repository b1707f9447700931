#!/usr/bin/env python3
"""Run a command; print "SECONDS PEAK_RSSANON_KIB" of it (RssAnon of the process, polled every
10 ms from /proc: the kernel keeps no peak of anonymous memory; VmHWM also counts mapped file
pages). Usage: peak_rss.py CMD ARGS... (its stdout/stderr go to /dev/null; exit status kept)."""
import subprocess
import sys
import time

t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peak = 0
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]))
    except OSError:
        pass
    time.sleep(0.01)
print(f"{time.monotonic() - t0:.3f} {peak}")
sys.exit(p.returncode)
