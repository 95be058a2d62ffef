"""Fleet metrics: the agent's health as Prometheus metrics (``prometheus_client``), served at ``/metrics``.

:class:`AgentCollector` reads everything at scrape time from views that exist anyway (the control
loop's ``tick_stats`` and snapshot, the devices' health, every adapter's ``status()``, the recorder's
:class:`~agent.recorder.recorder.Counts`), so nothing is counted twice and nothing runs between
scrapes. It is registered in a registry of the agent's own (several agents in one process do not
mix), together with ``prometheus_client``'s process collector (``process_cpu_seconds_total``,
``process_resident_memory_bytes``...). docs/recorder.md lists every metric with its unit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from agent.recorder.recorder import LATENESS_BUCKETS_S

#: the content type of the text format served at /metrics
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
P = "robot_agent_"
DEVICE_STATES = ("ok", "degraded", "lost")
LINK_STATES = ("up", "connecting", "down")
#: LinkStatus counters that count video frames sent / dropped (per link)
VIDEO_SENT = ("frames_sent", "video_sent", "video_frames")
VIDEO_DROPPED = ("video_too_old", "video_oversize_skipped", "video_late", "frames_dropped", "video_dropped")


class AgentCollector(Collector):
    """Every ``robot_agent_*`` metric of one agent (see the module docstring).

    Args:
        agent: the agent.app.Agent (``cfg``, ``control``, ``hardware``, ``adapters``, ``recorder``).
    """

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Any]:
        a = self.agent
        stats = a.control.tick_stats()
        snap = a.control.snapshot()
        yield _gauge("control_rate_target_hertz", "Configured control loop rate (Hz)", a.cfg.control.rate_hz)
        yield _gauge("control_rate_hertz", "Control loop rate achieved over the last ~1 s (Hz)", stats.achieved_hz)
        yield _counter("control_ticks", "Control ticks run", stats.ticks)
        yield _counter("control_late_ticks", "Control ticks that started over half a period late or overran",
                       stats.late_ticks)
        yield _gauge("control_max_tick_seconds", "Longest control tick since start (s)", stats.max_tick_s)
        yield _gauge("control_keeps_rate", "1 while the loop keeps >= 80 % of its rate", float(a.control.keeps_rate()))

        links = GaugeMetricFamily(P + "link_up", "1 while the protocol link is up", labels=["link"])
        lstate = GaugeMetricFamily(P + "link_state", "1 for the link's current state", labels=["link", "state"])
        sent = CounterMetricFamily(P + "video_frames_sent", "Video frames sent per link", labels=["link"])
        dropped = CounterMetricFamily(P + "video_frames_dropped", "Video frames dropped per link and reason",
                                      labels=["link", "reason"])
        received = CounterMetricFamily(P + "link_messages_received", "Messages received per link", labels=["link"])
        for name, adapter in list(a.adapters.items()):
            try:
                st = adapter.status()
            except Exception:  # noqa: BLE001 - one adapter's bug must not empty the scrape
                continue
            state = getattr(st.state, "value", str(st.state))
            links.add_metric([name], float(bool(st.connected)))
            for s in LINK_STATES:
                lstate.add_metric([name, s], float(state == s))
            counters = dict(st.counters)
            sent.add_metric([name], float(sum(counters.get(k, 0) for k in VIDEO_SENT)))
            for k in VIDEO_DROPPED:
                if k in counters:
                    dropped.add_metric([name, k], float(counters[k]))
            if "received" in counters:
                received.add_metric([name], float(counters["received"]))
        yield links
        yield lstate
        yield sent
        yield dropped
        yield received

        rec = getattr(a, "recorder", None)
        counts = rec.counts if rec is not None else None
        yield _labelled_counter("link_reconnects", "Times a link came up again after it was up", ["link"],
                                _reconnects(counts))
        yield _labelled_counter("link_drops", "Times a link that was up went down", ["link"],
                                {(k,): v for k, v in _copy(counts.link_drops).items()} if counts else {})

        dev = GaugeMetricFamily(P + "device_state", "1 for the device's current health state",
                                labels=["device", "state"])
        errs = CounterMetricFamily(P + "device_errors", "Errors per device since start", labels=["device"])
        for d in snap.devices:
            for s in DEVICE_STATES:
                dev.add_metric([d.name, s], float(d.state == s))
            errs.add_metric([d.name], float(d.errors))
        yield dev
        yield errs

        if snap.power is not None:
            if snap.power.voltage_v is not None:
                yield _gauge("battery_volts", "Battery bus voltage (V)", snap.power.voltage_v)
            yield _gauge("battery_amperes", "Battery current, + discharging (A)", snap.power.current_a)
            if snap.power.percent is not None:
                yield _gauge("battery_percent", "Battery state of charge estimate (%)", snap.power.percent)
        yield _gauge("halted", "1 while an e-stop or failsafe latch refuses motion", float(snap.safety.halted))
        yield _gauge("speed_meters_per_second", "Measured forward speed (m/s)", snap.odom.vx_mps)

        if counts is not None:
            late = HistogramMetricFamily(P + "control_tick_lateness_seconds",
                                         "How much later than one period each control tick followed the previous one (s)")
            cumulative, acc = [], 0
            for bound, n in zip(LATENESS_BUCKETS_S, counts.lateness):
                acc += n
                cumulative.append((repr(bound), float(acc)))
            acc += counts.lateness[-1]
            cumulative.append(("+Inf", float(acc)))
            late.add_metric([], cumulative, sum_value=counts.lateness_sum_s)
            yield late
            yield _labelled_counter("commands", "Commands received by source and verdict "
                                    "(applied, overridden, refused, rejected)", ["source", "verdict"],
                                    _copy(counts.commands))
            yield _labelled_counter("stops", "Stop commands by source", ["source"],
                                    {(k,): v for k, v in _copy(counts.stops).items()})
            yield _labelled_counter("estops", "Emergency stops set, by setter", ["by"],
                                    {(k,): v for k, v in _copy(counts.estops).items()})
            yield _labelled_counter("failsafes", "Failsafe trips by kind (battery, tilt, stall)", ["kind"],
                                    {(k,): v for k, v in _copy(counts.failsafes).items()})
            yield _labelled_counter("incidents", "Incidents by kind", ["kind"],
                                    {(k,): v for k, v in _copy(counts.incidents).items()})
            yield _counter("recorder_written_bytes", "Bytes written to recordings", rec.bytes_written())
            yield _gauge("recorder_degraded", "1 once a write error stopped the recorder", float(bool(rec.degraded)))
            yield _counter("recorder_cpu_seconds", "CPU time of the recorder thread (s)", rec.cpu_s)
            yield _labelled_counter("recorder_dropped", "Items dropped because a recorder queue was full",
                                    ["queue"], {(k,): v for k, v in rec.dropped().items()})


def _copy(counter: Any) -> dict[Any, int]:
    """A copy of a Counter the recorder thread may be adding a key to right now (retried, never raises)."""
    for _ in range(5):
        try:
            return dict(counter)
        except RuntimeError:        # dictionary changed size during iteration
            continue
    return {}


def _reconnects(counts: Any) -> dict[tuple[str, ...], float]:
    if counts is None:
        return {}
    return {(k,): max(0, v - 1) for k, v in _copy(counts.link_connects).items()}


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, value=float(value))


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(P + name, doc, value=float(value))


def _labelled_counter(name: str, doc: str, labels: list[str],
                      values: dict[tuple[str, ...], float]) -> CounterMetricFamily:
    c = CounterMetricFamily(P + name, doc, labels=labels)
    for key, value in sorted(values.items()):
        c.add_metric(list(key), float(value))
    return c


def registry_for(agent: Any) -> CollectorRegistry:
    """A registry of the agent's own: :class:`AgentCollector` and the process collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(AgentCollector(agent))
    ProcessCollector(registry=reg)
    return reg


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``registry``."""
    return generate_latest(registry)
