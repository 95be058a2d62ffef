// Robot console page: one WebSocket to the agent (/ws), no dependencies.
// Frames arrive as binary JPEG messages; after showing one the page sends {"type":"frame"}
// so the agent sends the newest next (never a backlog). Motion is a velocity command
// {"type":"drive","vx","omega"} repeated every repeat_ms while a key, the pad or the gamepad
// is held, the first of each new press (key-down, touch, stick out of the dead zone) marked
// "press": true; release sends one zero command. Space and gamepad B send {"type":"stop"};
// the STOP button sends {"type":"estop"} (latched until released here or on the robot).
// One tab drives at a time: the others watch until "take control" ({"type":"take"}).
// While the socket is not open nothing is queued except the STOP button's e-stop (the safe
// direction): the page says at once, in red, that it was NOT SENT, and sends it the moment the
// socket is open again, saying so. Drives and stops pressed while disconnected are dropped (the
// agent already stopped this tab's motion when the link dropped) and the page says so.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const KEYS = { ArrowUp: [1, 0], KeyW: [1, 0], ArrowDown: [-1, 0], KeyS: [-1, 0],
                 ArrowLeft: [0, 1], KeyA: [0, 1], ArrowRight: [0, -1], KeyD: [0, -1] };
  const DEADZONE = 0.15, PLOT_S = 60, TURN = 0.4;   // full stick/key = TURN x the omega limit
  let ws = null, limits = { vx_mps: 0.5, omega_radps: 1.0 }, repeatMs = 100, timer = null;
  let frames = 0, frameUrl = null, moving = false, latched = false, pressPending = false, gpWas = false;
  let control = { you: false, holder: null }, confirmTimer = null, estopPending = null;
  const held = new Set(), pad = { x: 0, y: 0, active: false };
  const series = { battery: [], speed: [] };

  function linkOpen() { return ws !== null && ws.readyState === WebSocket.OPEN; }
  function send(msg) {                     // true when handed to an open socket; nothing is queued here
    if (!linkOpen()) return false;
    ws.send(JSON.stringify(msg)); return true;
  }
  function notice(text, state) {           // the link notice: "bad" (red) or "done"; null hides it
    const el = $("link-notice");
    el.hidden = text === null; el.textContent = text || ""; el.dataset.state = state || "";
  }
  function setText(id, v, digits) {
    $(id).textContent = (v === null || v === undefined) ? "-" : (digits === undefined ? v : v.toFixed(digits));
  }

  function connect() {
    ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
    ws.binaryType = "blob";
    ws.onopen = () => {
      $("link").textContent = "connected"; $("link").dataset.state = "open";
      if (estopPending !== null && send({ type: "estop" })) {   // the STOP pressed while disconnected
        notice(`EMERGENCY STOP sent on reconnect at ${clock(Date.now() / 1000)} (STOP was pressed at `
          + `${clock(estopPending)} while the link was down)`, "done");
        $("cmd").textContent = "EMERGENCY STOP (sent on reconnect)"; estopPending = null;
      } else if ($("link-notice").dataset.state === "bad") notice(null);   // a stop or release not sent
    };
    ws.onclose = () => {
      $("link").textContent = "disconnected"; $("link").dataset.state = "closed";
      clearInterval(timer); timer = null; setTimeout(connect, 1000);
    };
    ws.onmessage = (ev) => {
      if (ev.data instanceof Blob) { showFrame(ev.data); return; }
      const msg = JSON.parse(ev.data);
      if (msg.type === "hello") hello(msg);
      else if (msg.type === "state") state(msg);
      else if (msg.type === "control") showControl(msg);
      else if (msg.type === "error") $("error").textContent = msg.message;
    };
  }

  function hello(msg) {
    limits = msg.limits; repeatMs = msg.repeat_ms; showControl(msg.control);
    $("name").textContent = msg.name; $("camera-id").textContent = msg.camera || "no camera";
    if (!timer) timer = setInterval(driveTick, repeatMs);
  }

  function showFrame(blob) {
    const img = $("camera"), url = URL.createObjectURL(blob);
    img.onload = img.onerror = () => {
      if (frameUrl) URL.revokeObjectURL(frameUrl);
      frameUrl = url; frames += 1; $("frames").textContent = frames;
      send({ type: "frame" });
    };
    img.src = url;
  }

  function clock(unixS) { return new Date(unixS * 1000).toLocaleTimeString([], { hour12: false }); }
  function pad2(n) { return String(n).padStart(2, "0"); }
  function when(unixS) {                   // the time today; date and time (ISO 8601, local) another day
    const d = new Date(unixS * 1000), now = new Date();
    if (d.toDateString() === now.toDateString()) return clock(unixS);
    return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} `
      + `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  }

  function showControl(c) {
    const was = control.you;
    control = c;
    const el = $("control");
    el.dataset.you = String(c.you);
    el.textContent = c.you ? "this tab" : c.holder === null ? "no tab (take control to drive)"
      : `another tab (#${c.holder}, ${c.holder_peer}), since ${clock(c.since_unix_s)}`;
    $("take").hidden = c.you;
    if (was !== c.you) {                  // control changed hands: whatever was held is let go
      held.clear(); pad.active = false; centerKnob(); moving = false; latched = false; pressPending = false;
      $("cmd").textContent = c.you ? "in control: press to drive" : "watching";
    }
    if (!was && c.you && $("error").textContent.startsWith("this tab watches")) $("error").textContent = "";
  }

  function showSafety(safety) {
    const box = $("halt-list"); box.textContent = "";
    let estop = false;
    for (const h of safety.halts) {
      const div = document.createElement("div");
      const what = h.kind === "estop" ? "EMERGENCY STOP" : `${h.kind.toUpperCase()} FAILSAFE`;
      div.textContent = `${what} · set by ${h.by} at ${when(h.since_unix_s)}` + (h.reason ? ` · ${h.reason}` : "")
        + (h.cleared ? " · condition cleared: ends with the next drive" : "");
      div.dataset.kind = h.kind; box.appendChild(div);
      estop = estop || h.kind === "estop";
    }
    $("halts").hidden = !safety.halts.length;
    $("release-box").hidden = !estop;
    if (!estop) { $("confirm-box").hidden = true; $("release").hidden = false; }
    $("cap").hidden = safety.speed_cap_mps === null;
    if (safety.speed_cap_mps !== null) {
      $("cap").textContent = `speed limited to ${safety.speed_cap_mps.toFixed(2)} m/s: ${safety.speed_cap_reason}`;
    }
  }

  // duty sent and measured speed per track: "are the motors at zero?" at a glance
  function motors(t) {
    const zero = t.duty_left === 0 && t.duty_right === 0;
    const f = (v, d) => (v === null || v === undefined ? "-" : (v >= 0 ? "+" : "") + v.toFixed(d));
    $("motors").textContent = (zero ? "at zero" : "DRIVING") + ` · duty L ${f(t.duty_left, 2)} R ${f(t.duty_right, 2)}`
      + ` · speed L ${f(t.left_mps, 2)} R ${f(t.right_mps, 2)} m/s`;
    $("motors").className = zero ? "" : "driving";
  }

  function state(s) {
    const b = s.battery;
    setText("battery-v", b && b.voltage_v, 2); setText("battery-pct", b && b.percent, 0);
    setText("battery-a", b && b.current_a, 2);
    setText("speed-vx", s.speed.vx_mps, 2); setText("speed-omega", s.speed.omega_radps, 2);
    motors(s.tracks);
    setText("odom-x", s.odom.x_m, 2); setText("odom-y", s.odom.y_m, 2); setText("odom-yaw", s.odom.yaw_rad, 2);
    setText("odom-distance", s.odom.distance_m, 3);
    $("source").textContent = s.source || "none"; $("watchdog").textContent = s.watchdog;
    $("stopped").hidden = !s.stopped;
    if (s.control) showControl(s.control);
    if (s.safety) showSafety(s.safety);
    const c = s.console;
    $("counters").textContent = `${c.executed} ok · ${c.rejected} rejected · ${c.refused} refused`;
    list("devices", s.devices.map((d) => [d.state, `${d.name}: ${d.state}` + (d.errors ? ` (${d.errors} errors)` : "")]));
    list("faults", (s.warnings || []).map((w) => ["fault", w]).concat(s.faults.map((f) => ["fault", f])));
    plot("battery", s.t, b ? b.voltage_v : null, "V", "#6c6");
    plot("speed", s.t, s.speed.vx_mps, "m/s", "#5ab");
  }

  function list(id, items) {
    const ul = $(id); ul.textContent = "";
    for (const [cls, text] of items) {
      const li = document.createElement("li"); li.className = cls; li.textContent = text; ul.appendChild(li);
    }
  }

  function plot(name, t, value, unit, color) {
    const data = series[name];
    if (value !== null && t !== null) data.push([t, value]);
    while (data.length && data[0][0] < t - PLOT_S) data.shift();
    const cv = $("plot-" + name), g = cv.getContext("2d"), w = cv.width, h = cv.height;
    g.clearRect(0, 0, w, h);
    if (!data.length) return;
    let lo = Math.min(...data.map((d) => d[1])), hi = Math.max(...data.map((d) => d[1]));
    if (hi - lo < 1e-3) { lo -= 0.5; hi += 0.5; }
    g.strokeStyle = color; g.lineWidth = 1.5; g.beginPath();
    data.forEach(([ti, v], i) => {
      const x = w - (t - ti) / PLOT_S * w, y = h - 12 - (v - lo) / (hi - lo) * (h - 24);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke(); g.fillStyle = "#9aa"; g.font = "11px sans-serif";
    g.fillText(`${name} ${data[data.length - 1][1].toFixed(2)} ${unit} (${lo.toFixed(2)}..${hi.toFixed(2)}, 60 s)`, 4, 11);
  }

  function gamepadAxes() {
    const pads = navigator.getGamepads ? Array.from(navigator.getGamepads()).filter(Boolean) : [];
    if (!pads.length) { $("gamepad").textContent = "none"; return null; }
    const gp = pads[0];
    $("gamepad").textContent = gp.id.slice(0, 40);
    if (gp.buttons[1] && gp.buttons[1].pressed) { stop(); return null; }
    const x = gp.axes[0] || 0, y = gp.axes[1] || 0, out = Math.hypot(x, y) > DEADZONE;
    if (out && !gpWas && !latched) pressPending = true;    // the stick left the dead zone: a new press
    gpWas = out;
    return out ? [-y, -x] : null;
  }

  function wanted() {                      // [forward -1..1, left -1..1] or null when nothing is held
    if (held.size) {
      let f = 0, l = 0;
      for (const k of held) { f += KEYS[k][0]; l += KEYS[k][1]; }
      return [Math.max(-1, Math.min(1, f)), Math.max(-1, Math.min(1, l))];
    }
    if (pad.active) return [-pad.y, -pad.x];
    return gamepadAxes();
  }

  function driveTick() {
    const w = wanted(), scale = $("scale").value / 100;
    if (latched) { if (!w) latched = false; return; }   // after stop: let go (or press anew) first
    if (w && !control.you) {                             // watching: nothing is sent
      $("error").textContent = "this tab watches: take control to drive"; return;
    }
    if ((w || moving) && !linkOpen()) {                 // never queued: the link dropping stopped this tab
      $("cmd").textContent = "not sent: disconnected"; moving = false; return;
    }
    if (w) {
      const vx = +(w[0] * limits.vx_mps * scale).toFixed(3), omega = +(w[1] * limits.omega_radps * TURN * scale).toFixed(3);
      const msg = { type: "drive", vx: vx, omega: omega };
      if (pressPending && (vx || omega)) { msg.press = true; pressPending = false; }
      send(msg); moving = true;
      $("cmd").textContent = `vx ${vx} m/s · omega ${omega} rad/s`;
    } else if (moving) {
      send({ type: "drive", vx: 0, omega: 0 }); moving = false; $("cmd").textContent = "released";
    }
  }

  function newPress() { pressPending = true; latched = false; }

  function stop() {                                     // momentary: a new press drives again
    const sent = send({ type: "stop" }); moving = false; latched = true; pressPending = false;
    held.clear(); pad.active = false; centerKnob();
    $("cmd").textContent = sent ? "stop" : "stop NOT SENT: disconnected";
    if (!sent && estopPending === null) {
      notice("stop NOT SENT: disconnected (the robot stopped this tab's motion when the link dropped)", "bad");
    }
  }

  function estop() {                                    // latched on the robot until released
    const sent = send({ type: "estop" }); moving = false; latched = true; pressPending = false;
    held.clear(); pad.active = false; centerKnob();
    if (sent) { $("cmd").textContent = "EMERGENCY STOP"; return; }
    if (estopPending === null) estopPending = Date.now() / 1000;   // sent the moment the socket is open
    $("cmd").textContent = "EMERGENCY STOP NOT SENT: disconnected";
    notice(`EMERGENCY STOP NOT SENT: disconnected (pressed at ${clock(estopPending)}); `
      + "it is sent as soon as the link is back", "bad");
  }

  function askRelease(on) {
    clearTimeout(confirmTimer);
    $("confirm-box").hidden = !on; $("release").hidden = on;
    if (on) confirmTimer = setTimeout(() => askRelease(false), 8000);
  }

  document.addEventListener("keydown", (ev) => {
    if (ev.code === "Space") { ev.preventDefault(); if (!ev.repeat) stop(); return; }
    if (KEYS[ev.code]) {
      ev.preventDefault();
      if (ev.repeat) return;                             // a held key's auto-repeat is not a press
      if (!held.has(ev.code)) { held.add(ev.code); newPress(); driveTick(); }
    }
  });
  document.addEventListener("keyup", (ev) => { if (KEYS[ev.code]) { held.delete(ev.code); driveTick(); } });
  window.addEventListener("blur", () => { held.clear(); pad.active = false; centerKnob(); driveTick(); });
  $("stop").addEventListener("click", estop);
  $("take").addEventListener("click", () => send({ type: "take" }));
  $("release").addEventListener("click", () => askRelease(true));
  $("release-cancel").addEventListener("click", () => askRelease(false));
  $("release-confirm").addEventListener("click", () => {
    if (!send({ type: "release_estop" })) notice("release NOT SENT: disconnected (the e-stop still holds)", "bad");
    askRelease(false);
  });
  $("scale").addEventListener("input", () => { $("scale-pct").textContent = $("scale").value; });

  const joy = $("joystick"), knob = $("knob");
  function centerKnob() { knob.style.left = "60px"; knob.style.top = "60px"; pad.x = pad.y = 0; }
  function padMove(ev) {
    const r = joy.getBoundingClientRect(), rad = r.width / 2;
    let x = (ev.clientX - r.left - rad) / rad, y = (ev.clientY - r.top - rad) / rad;
    const n = Math.hypot(x, y); if (n > 1) { x /= n; y /= n; }
    pad.x = Math.abs(x) < DEADZONE ? 0 : x; pad.y = Math.abs(y) < DEADZONE ? 0 : y;
    knob.style.left = (60 + x * 60) + "px"; knob.style.top = (60 + y * 60) + "px";
  }
  joy.addEventListener("pointerdown", (ev) => {
    joy.setPointerCapture(ev.pointerId); pad.active = true; newPress(); padMove(ev);
  });
  joy.addEventListener("pointermove", (ev) => { if (pad.active) padMove(ev); });
  for (const end of ["pointerup", "pointercancel", "lostpointercapture"]) {
    joy.addEventListener(end, () => { pad.active = false; centerKnob(); driveTick(); });
  }
  connect();
})();
