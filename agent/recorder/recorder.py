"""The flight recorder: one thread that turns what the agent does into MCAP files and incidents.

Nothing here runs on the control thread or the event loop except appends to bounded queues:

- snapshots: the control tick already keeps them in its ring (``ControlLoop.samples_since``); the
  recorder thread reads them after the fact, every :data:`POLL_S`;
- commands and their verdicts: ``ControlLoop.on_command`` calls :meth:`Recorder.command` on the
  submitter's thread, which appends to a bounded deque (a full queue drops and counts);
- log records at WARNING and above: :class:`agent.recorder.feeds.LogTap`, a logging handler that appends likewise;
- link states: :meth:`Recorder.watch_links`, a task on the event loop that reads every adapter's
  ``status()`` every :data:`LINK_POLL_S` and queues the changes;
- camera frames: :meth:`Recorder.watch_camera`, a task on the event loop that awaits the video hub's
  ``next_encoded`` in ARTEX's own format (``FrameFormat("jpeg", quality=artex.jpeg_quality)``: the hub
  encodes a frame once per format, so while ARTEX streams the recorder reuses its JPEG) at
  ``recorder.frame_fps``, and queues the bytes.

The thread encodes JSON, finds incidents (agent.recorder.incidents), writes files
(agent.recorder.writer) and counts for /metrics (:class:`Counts`). A write error degrades the
recorder (logged once, ``degraded`` in :meth:`status`); the robot is not touched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.config import AgentConfig
from agent.errors import CommandDeclined
from agent.commands import BaseVelocity, JointVelocity, Stop, TrackDuty
from agent.model import Snapshot
from agent.support.ratelimit import RateLimitedLog
from agent.recorder import channels, feeds
from agent.recorder.incidents import Detector, Incident, IncidentLog, moving, tick_lateness

if TYPE_CHECKING:
    from agent.recorder.writer import RotatingWriter

log = logging.getLogger(__name__)

#: the recorder thread wakes this often, s (the snapshot ring holds ~10 s at 50 Hz; flush() and close() wake it at once)
POLL_S = 0.25
#: incidents kept in memory for the console and /metrics
KEEP_INCIDENTS = 200
_VELOCITY = (BaseVelocity, TrackDuty, JointVelocity)
#: upper bounds of the control tick lateness histogram (robot_agent_control_tick_lateness_seconds), s
LATENESS_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class Counts:
    """Counters for /metrics, written by the recorder thread only (read anywhere; ints are atomic).

    Attributes:
        commands: (source, verdict) -> commands. incidents: kind -> incidents.
        lateness: control ticks per lateness bucket (:data:`LATENESS_BUCKETS_S`); lateness_sum_s: their sum, s.
        stops: source -> stop commands. estops: setter -> e-stops. failsafes: kind -> trips.
        link_drops, link_connects: link -> count. dropped: queue -> items dropped (full queue).
    """

    def __init__(self) -> None:
        self.commands: Counter[tuple[str, str]] = Counter()
        self.incidents: Counter[str] = Counter()
        self.stops: Counter[str] = Counter()
        self.estops: Counter[str] = Counter()
        self.failsafes: Counter[str] = Counter()
        self.link_drops: Counter[str] = Counter()
        self.link_connects: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.lateness = [0] * (len(LATENESS_BUCKETS_S) + 1)     # per bucket (not cumulative), last: above all
        self.lateness_sum_s = 0.0

    def late(self, seconds: float) -> None:
        """Count one tick's lateness, s."""
        self.lateness_sum_s += seconds
        for i, bound in enumerate(LATENESS_BUCKETS_S):
            if seconds <= bound:
                self.lateness[i] += 1
                return
        self.lateness[-1] += 1


class Recorder:
    """The flight recorder of one agent; see the module docstring.

    Args:
        cfg: the configuration (``recorder``, ``artex.jpeg_quality``).
        control: the control loop (``samples_since``, ``snapshot``, ``on_command``).
        directory: overrides ``cfg.recorder.directory()`` (None: that).

    Attributes:
        directory: where files go, or None (not recording). counts: :class:`Counts`.
        incidents: the latest incidents, oldest first.
    """

    def __init__(self, cfg: AgentConfig, control: Any, directory: Path | None = None) -> None:
        self.cfg = cfg
        self.settings = rc = cfg.recorder
        self.control = control
        self.directory = directory or (rc.directory() if rc.enabled else None)
        self.counts = Counts()
        self.incidents: deque[Incident] = deque(maxlen=KEEP_INCIDENTS)
        self._commands = feeds.BoundedQueue(rc.queue_size)
        self._logs = feeds.BoundedQueue(rc.queue_size)
        self._events = feeds.BoundedQueue(rc.queue_size)
        self._frames = feeds.BoundedQueue(max(4, int(rc.frame_fps * 4)))
        self._tap = feeds.LogTap(self._logs)
        self._bugs = RateLimitedLog(log, 10.0)
        self._detector = Detector()
        self._writer: RotatingWriter | None = None
        self._incident_log = IncidentLog(self.directory) if self.directory is not None else None
        self._seq = control.snapshot().seq
        self._period, self._rest_s = 1.0 / cfg.control.rate_hz, getattr(control, "rest_period_s", None)
        self._last: Snapshot | None = None
        self._imu_t: float | None = None
        self._power_t: float | None = None
        self._servo: tuple | None = None
        self._safety: tuple | None = None
        self._owner: str | None = None
        self._missed = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._flushed = threading.Condition()
        self._flush_asked = 0
        self._flush_done = 0
        self._thread: threading.Thread | None = None
        self.cpu_s = 0.0
        self.degraded = ""
        control.on_command(self.command)

    # ------------------------------------------------------------------ producers (any thread)
    def command(self, source: str, command: Any, err: Exception | None) -> None:
        """The control loop's command tap: queue (time, source, command, error); never blocks."""
        self._commands.put((time.monotonic(), time.time(), source, command, err))

    def event(self, topic: str, t_unix_s: float, message: dict[str, Any]) -> None:
        """Queue one event message (links) for the thread; never blocks."""
        self._events.put((topic, t_unix_s, message))

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the thread and the log tap."""
        if self._thread is not None:
            return
        if self.directory is not None and self._writer is None:   # MCAP loads to record, after the hub
            from agent.recorder.writer import RotatingWriter          # connect (the taps queue till then)
            rc = self.settings
            self._writer = RotatingWriter(self.directory, max_bytes=int(rc.max_mib * 2**20),
                                          file_bytes=int(rc.file_mib * 2**20), chunk_bytes=rc.chunk_kib * 1024,
                                          chunk_max_s=rc.chunk_max_s)
        if self.settings.enabled and self.directory is None:
            log.info("recorder: no recordings directory (recorder.dir unset and no $STATE_DIRECTORY): "
                     "not recording; /metrics still counts")
        logging.getLogger().addHandler(self._tap)
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Record what is queued, finish the file, stop the thread (blocking: call off the event loop)."""
        logging.getLogger().removeHandler(self._tap)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Record everything queued so far and write the chunk in progress; True once done (blocking)."""
        if self._thread is None:
            return False
        with self._flushed:
            self._flush_asked += 1
            want = self._flush_asked
            self._wake.set()
            return self._flushed.wait_for(lambda: self._flush_done >= want, timeout_s)

    def status(self) -> dict[str, Any]:
        """``recording`` (bool), ``dir``, ``degraded`` ("" or why), ``bytes_written``, ``messages``,
        ``file`` (current), ``dropped`` (queue -> items), ``missed_snapshots``, ``incidents`` (count)."""
        w = self._writer
        return {"recording": w is not None and not w.degraded, "dir": str(self.directory or ""),
                "degraded": self.degraded, "bytes_written": self.bytes_written(),
                "messages": w.messages if w else 0, "file": str(w.current or "") if w else "",
                "dropped": self.dropped(), "missed_snapshots": self._missed, "incidents": len(self.incidents)}

    def bytes_written(self) -> int:
        """Bytes written to recording files since start."""
        w = self._writer
        if w is None:
            return 0
        return w.bytes_written + (w._open.file.written if w._open is not None else 0)

    def dropped(self) -> dict[str, int]:
        """Items dropped because a queue was full, by queue."""
        return {"commands": self._commands.dropped, "logs": self._logs.dropped, "events": self._events.dropped,
                "frames": self._frames.dropped}

    # ------------------------------------------------------------------ event-loop tasks
    async def watch_links(self, adapters: dict[str, Any]) -> None:
        """Queue every change of a link's state until cancelled (agent.recorder.feeds.watch_links)."""
        await feeds.watch_links(self, adapters)

    async def watch_camera(self, video: Any, camera_id: str) -> None:
        """Queue camera JPEGs at ``frame_fps`` until cancelled (agent.recorder.feeds.watch_camera)."""
        if self.settings.frame_fps > 0 and self._writer is not None:
            await feeds.watch_camera(self, video, camera_id, self.settings.frame_fps, self.cfg.artex.jpeg_quality)

    def frame(self, camera_id: str, t_unix_s: float, jpeg: bytes) -> None:
        """Queue one JPEG for the thread; never blocks (a full queue drops and counts)."""
        self._frames.put((camera_id, t_unix_s, jpeg))

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        cpu0 = time.thread_time()
        while True:
            stopping = self._stop.is_set()
            with self._flushed:
                asked = self._flush_asked
            try:
                self._pass()
                if asked > self._flush_done and self._writer is not None:
                    self._writer.flush()
                elif self._writer is not None:
                    self._writer.poll()
            except Exception:  # noqa: BLE001 - the recorder must never take anything down with it
                self._bugs.log(logging.ERROR, "pass", "recorder: pass failed", exc_info=True)
            self._check_degraded()
            self.cpu_s = time.thread_time() - cpu0
            if asked > self._flush_done:
                with self._flushed:
                    self._flush_done = asked
                    self._flushed.notify_all()
            if stopping:
                break
            self._wake.wait(POLL_S)
            self._wake.clear()
        if self._writer is not None:
            self._writer.close()
            self._check_degraded()

    def _check_degraded(self) -> None:
        if self._writer is not None and self._writer.degraded and not self.degraded:
            self.degraded = self._writer.degraded

    def _write(self, topic: str, t_unix_s: float, message: dict[str, Any]) -> None:
        if self._writer is not None:
            self._writer.write(topic, t_unix_s, channels.encode(message))

    def _pass(self) -> None:
        snaps: list[Snapshot] = []
        while True:
            got = self.control.samples_since(self._seq, 512)
            if not got:
                break
            if got[0].seq != self._seq + 1 and self._seq:
                self._missed += got[0].seq - self._seq - 1
            self._seq = got[-1].seq
            snaps.extend(got)
            if len(got) < 512:
                break
        commands = self._commands.take()
        # snapshots and commands in time order, so a command sees the tank as it was then
        items = [(s.t_mono_s, 0, s) for s in snaps] + [(c[0], 1, c) for c in commands]
        items.sort(key=lambda x: (x[0], x[1]))
        for _, kind, item in items:
            if kind == 0:
                self._snapshot(item)
            else:
                self._command(*item)
        for topic, t, message in self._events.take():
            if topic == "/links":
                self._link(t, message)
            self._write(topic, t, {"timestamp": channels.stamp(t), **message})
        for record, text in self._logs.take():
            self._write("/log", record.created, channels.log_record(record, text))
        for camera_id, t, jpeg in self._frames.take():
            self._write(f"/camera/{camera_id}", t, channels.image(t, camera_id, jpeg))

    def _snapshot(self, s: Snapshot) -> None:
        t = s.t_unix_s
        if self._last is not None and s.seq == self._last.seq + 1:
            self.counts.late(tick_lateness(self._last, s, self._period, self._rest_s))
        if self._writer is not None:     # not recording: incidents and counts only
            self._write("/drive", t, channels.drive(s))
            self._write("/odometry", t, channels.odometry(s))
            if s.imu is not None and s.imu.t_mono_s != self._imu_t:
                self._imu_t = s.imu.t_mono_s
                self._write("/imu", t, channels.imu(s))
            if s.power is not None and s.power.t_mono_s != self._power_t:
                self._power_t = s.power.t_mono_s
                self._write("/battery", t, channels.battery(s))
            servo = (s.joints.q, s.joints.target, s.gripper)
            if s.joints.names and servo != self._servo:
                self._servo = servo
                self._write("/servo", t, channels.servo(s))
            if s.active_source != self._owner:
                self._write("/arbitration", t, {"timestamp": channels.stamp(t), "active_source": s.active_source,
                                                "previous": self._owner or ""})
                self._owner = s.active_source
            safety = (s.stopped, s.watchdog, s.safety)
            if safety != self._safety:
                self._safety = safety
                self._write("/safety", t, channels.safety(s))
            if self._last is None or s.devices != self._last.devices:     # the same reports: no transition
                before = {d.name: d for d in self._last.devices} if self._last is not None else {}
                for d in s.devices:      # every device at the first snapshot, then each transition
                    b = before.get(d.name)
                    if b is None or b.state != d.state:
                        self._write("/devices", t, {"timestamp": channels.stamp(t), "device": d.name,
                                                    "state": d.state, "previous": b.state if b else "",
                                                    "last_error": d.last_error, "errors": d.errors})
        self._last = s
        for incident in self._detector.snapshot(s):
            self._incident(incident)

    def _command(self, t_mono: float, t_unix: float, source: str, command: Any, err: Exception | None) -> None:
        if err is None:
            verdict, reason = "applied", ""
            last = self._last
            if isinstance(command, _VELOCITY) and last is not None and last.active_source not in ("", source):
                verdict, reason = "overridden", f"{last.active_source} drives"
        else:
            verdict = "refused" if isinstance(err, CommandDeclined) else "rejected"
            reason = str(err)
        self.counts.commands[(source, verdict)] += 1
        is_stop = isinstance(command, Stop)
        if is_stop and err is None:
            self.counts.stops[source] += 1
        self._write("/commands", t_unix, {"timestamp": channels.stamp(t_unix), "source": source,
                                          "command": type(command).__name__, "args": channels.command_args(command),
                                          "verdict": verdict, "reason": reason})
        last = self._last
        for incident in self._detector.command(t_unix, source, is_stop and err is None,
                                               last is not None and moving(last)):
            self._incident(incident)

    def _link(self, t: float, message: dict[str, Any]) -> None:
        name, connected = message["link"], message["connected"]
        if message["event"] == "connect":
            self.counts.link_connects[name] += 1
        for incident in self._detector.link(t, name, connected, message["last_error"]):
            self.counts.link_drops[name] += 1
            self._incident(incident)

    def _incident(self, incident: Incident) -> None:
        self.incidents.append(incident)
        self.counts.incidents[incident.kind] += 1
        if incident.kind == "estop":
            self.counts.estops[incident.source] += 1
        elif incident.kind == "failsafe":
            self.counts.failsafes[incident.reason.split(":", 1)[0]] += 1
        if self._incident_log is None:      # not recording (recorder off, or no directory): no claim it is
            log.debug("recorder: incident %s counted, not recorded: %s (%s)", incident.id, incident.reason,
                      incident.source)
        else:
            log.info("recorder: incident %s: %s (%s)", incident.id, incident.reason, incident.source)
        self._write("/incidents", incident.t_unix_s, {"timestamp": channels.stamp(incident.t_unix_s),
                                                      "id": incident.id, "kind": incident.kind,
                                                      "reason": incident.reason, "source": incident.source})
        if self._incident_log is not None and not self.degraded:
            try:
                self._incident_log.append(incident)
            except OSError as err:
                self.degraded = f"incident log write failed: {err}"
                log.error("recorder: %s; recording of incidents stopped (the robot is not affected)",
                          self.degraded, extra={"fault": "recorder"})
