"""The heartbeat file of trainer protocol 2: one JSON line, replaced atomically (FILE.tmp, then
rename). The main thread only updates fields (cheap); a beat is written at once on a phase
change and at most every `min_gap` s otherwise, and a daemon thread writes a pending beat
within `flush_s`. A hung main thread makes no new state, so the file stops changing: that is
the stall the runner sees.
"""
import json
import os
import socket
import threading
import time


class Heartbeat:
    def __init__(self, path, rank, min_gap=0.01, flush_s=0.025):
        self.path, self.rank = path, rank
        self.seq, self.step, self.phase, self.layer, self.op = 0, 0, "init", -1, ""
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.min_gap, self.flush_s = min_gap, flush_s
        self.dirty, self.last_write = False, 0.0
        self.lock = threading.Lock()
        self.closed = False
        if path:
            self._write(False, 0)
            t = threading.Thread(target=self._flusher, name="nsa_probe-heartbeat", daemon=True)
            t.start()

    def set(self, phase=None, layer=None, op=None, step=None):
        changed_phase = phase is not None and phase != self.phase
        if phase is not None:
            self.phase = phase
        if layer is not None:
            self.layer = layer
        if op is not None:
            self.op = op
        if step is not None:
            self.step = step
        if not self.path:
            return
        self.dirty = True
        if changed_phase or time.monotonic() - self.last_write >= self.min_gap:
            self._write(False, 0)

    def _write(self, exited, code):
        with self.lock:
            if self.closed:
                return
            self.seq += 1
            rec = {"seq": self.seq, "pid": self.pid, "rank": self.rank, "host": self.host, "step": self.step,
                   "phase": self.phase, "layer": self.layer, "op": self.op, "exited": exited,
                   "exit_code": code, "time": time.time()}
            tmp = self.path + ".tmp"
            try:
                with open(tmp, "w") as f:
                    f.write(json.dumps(rec) + "\n")
                os.replace(tmp, self.path)
            except OSError:
                pass   # the log channel itself: best effort, like the flight recorder's reader
            self.dirty, self.last_write = False, time.monotonic()
            if exited:
                self.closed = True

    def _flusher(self):
        while not self.closed:
            time.sleep(self.flush_s)
            if self.dirty:
                self._write(False, 0)

    def exit(self, code):
        if self.path and not self.closed:
            self.phase = "exit"
            self._write(True, code)
